#pragma once
// Internal: how Session starts Kokkos where its host backend runs threads of its own.

#include <string>

namespace tessera::detail {

/// Kokkos' default host execution space runs threads of its own (OpenMP, Threads, HPX).
bool kokkos_host_is_threaded() noexcept;

/// The flag that gives Kokkos `cores` host threads (--kokkos-num-threads=N, or Kokkos 3's
/// --kokkos-threads=N), or "" where the user chose: OMP_NUM_THREADS or KOKKOS_NUM_THREADS
/// set, or a thread flag among argv[1..argc).
std::string kokkos_threads_flag(int argc, const char* const* argv, int cores);

}  // namespace tessera::detail
