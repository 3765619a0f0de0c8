#pragma once
// The "machine" object of the benchmarks' JSON: where a result was measured, so that two
// files can be told apart before their numbers are compared.

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <string>

#include <tessera/core/build_info.hpp>
#include <tessera/core/session.hpp>

namespace tessera::apps {

/// Host name, ranks, cores, the MPI library, Tessera's and Kokkos' versions, where Kokkos'
/// kernels run, and rank 0's GPU with the ranks of its node that share it (both null where
/// data lives in host memory).
inline nlohmann::json machine_json(const Session& session) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const auto info = build_info();
  return {
      {"hostname", host},
      {"ranks", session.size()},
      {"cores", sysconf(_SC_NPROCESSORS_ONLN)},
      {"mpi", info.mpi_library},
      {"tessera", info.tessera_version},
      {"kokkos", info.kokkos_version},
      {"kokkos_space", info.kokkos_space},
      {"gpu", session.gpu_name().empty() ? nlohmann::json(nullptr) : nlohmann::json(session.gpu_name())},
      {"ranks_per_gpu", session.ranks_on_gpu() > 0 ? nlohmann::json(session.ranks_on_gpu()) : nlohmann::json(nullptr)}};
}

/// Where a GPU build's GEMMs run, for a start line: "on GPU 0 (NVIDIA H100 80GB HBM3)", or
/// with several ranks "rank 0 on GPU 0 (...), shared by 2 ranks" where they share it; empty
/// where data lives in host memory.
inline std::string gpu_placement(const Session& session) {
  if (session.gpu().empty()) return {};
  return (session.size() == 1 ? "on " : "rank 0 on ") + session.gpu() +
         (session.ranks_on_gpu() > 1 ? ", shared by " + std::to_string(session.ranks_on_gpu()) + " ranks" : "");
}

}  // namespace tessera::apps
