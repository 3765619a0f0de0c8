#pragma once
// Internal: how Session starts Kokkos where its host backend runs threads of its own.

#include <string>

namespace tessera::detail {

/// Kokkos' default host execution space runs threads of its own (OpenMP, Threads, HPX).
bool kokkos_host_is_threaded() noexcept;

/// The variable by which the user set the BLAS's threads (OPENBLAS_NUM_THREADS, else
/// OMP_NUM_THREADS), or nullptr where neither is set.
const char* blas_threads_variable() noexcept;

/// The BLAS runs a thread pool of its own (OpenBLAS built with pthreads), not OpenMP's and
/// not none.
bool blas_runs_own_threads() noexcept;

/// Kokkos' host threads for a rank with `cores` cores whose BLAS will run `blas_threads`
/// threads: the cores, except where the BLAS's threads are a pool of its own and more than
/// one; then 1, for the two pools would take turns on the same cores, and OpenMP's idle
/// threads spin (OMP_WAIT_POLICY is read as the runtime loads, before Tessera runs).
int kokkos_host_threads(int cores, int blas_threads, bool blas_pool_of_its_own) noexcept;

/// Session started Kokkos with fewer host threads than the BLAS gets, by the rule of
/// kokkos_host_threads() (not by the user's choice).
bool kokkos_threads_left_to_blas() noexcept;

/// The flag that gives Kokkos `cores` host threads (--kokkos-num-threads=N, or Kokkos 3's
/// --kokkos-threads=N), or "" where the user chose: OMP_NUM_THREADS or KOKKOS_NUM_THREADS
/// set, or a thread flag among argv[1..argc).
std::string kokkos_threads_flag(int argc, const char* const* argv, int cores);

}  // namespace tessera::detail
