
#include <tessera/core/error.hpp>

#include "core/fnv1a.hpp"
#include "parallel/replicas.hpp"

namespace tessera::parallel {

void verify_replicas(std::deque<nn::Parameter>& params, comm::Communicator& comm) {
  std::vector<std::int64_t> lo(params.size()), hi(params.size());
  for (std::size_t k = 0; k < params.size(); ++k) {
    auto h = Kokkos::create_mirror_view(params[k].value);
    Kokkos::deep_copy(h, params[k].value);
    tessera::detail::Fnv1a hash;
    for (std::size_t i = 0; i < h.size(); ++i) hash.bytes(&h(i), sizeof h(i));
    lo[k] = hi[k] = static_cast<std::int64_t>(hash.value() >> 1);
  }
  comm.all_reduce({lo.data(), lo.size()}, comm::ReduceOp::Min);
  comm.all_reduce({hi.data(), hi.size()}, comm::ReduceOp::Max);
  for (std::size_t k = 0; k < params.size(); ++k)
    if (lo[k] != hi[k])
      throw Error("data-parallel replicas differ: parameter '" + params[k].name +
                  "' does not hold the same values on every rank; initialise every rank from the same seed");
}

}  // namespace tessera::parallel
