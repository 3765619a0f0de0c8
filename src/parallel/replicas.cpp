#include <cstring>

#include <tessera/core/error.hpp>

#include "parallel/replicas.hpp"

namespace tessera::parallel {

void verify_replicas(std::deque<nn::Parameter>& params, comm::Communicator& comm) {
  std::vector<std::int64_t> lo(params.size()), hi(params.size());
  for (std::size_t k = 0; k < params.size(); ++k) {
    auto h = Kokkos::create_mirror_view(params[k].value);
    Kokkos::deep_copy(h, params[k].value);
    std::uint64_t hash = 1469598103934665603ull;
    for (std::size_t i = 0; i < h.size(); ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, &h(i), sizeof bits);
      hash = (hash ^ bits) * 1099511628211ull;
    }
    lo[k] = hi[k] = static_cast<std::int64_t>(hash >> 1);
  }
  comm.all_reduce({lo.data(), lo.size()}, comm::ReduceOp::Min);
  comm.all_reduce({hi.data(), hi.size()}, comm::ReduceOp::Max);
  for (std::size_t k = 0; k < params.size(); ++k)
    if (lo[k] != hi[k])
      throw Error("data-parallel replicas differ: parameter '" + params[k].name +
                  "' does not hold the same values on every rank; initialise every rank from the same seed");
}

}  // namespace tessera::parallel
