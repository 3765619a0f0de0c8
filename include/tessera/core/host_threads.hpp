#pragma once
/// \file
/// How many threads this rank's host BLAS runs, chosen so that the ranks of a node do not
/// oversubscribe its cores.

#include <string>

namespace tessera {

/// The host BLAS's threads on this rank, and why that many.
struct HostThreads {
  int threads = 1;  ///< 0 when Tessera cannot set them (a BLAS other than OpenBLAS)
  /// e.g. "2 cores / 2 ranks on this node", "OPENBLAS_NUM_THREADS=4", "not OpenBLAS: its own default"
  std::string reason;
  /// Kokkos' host threads on this rank where its host backend is threaded (OpenMP, Threads),
  /// else 0; Session starts Kokkos with as many as the BLAS gets unless the user chose
  /// (OMP_NUM_THREADS, KOKKOS_NUM_THREADS, --kokkos-num-threads), and with 1 where the BLAS
  /// runs more threads in a pool of its own (OpenBLAS built with pthreads): two pools on the
  /// same cores take turns, and OpenMP's idle threads spin.
  int kokkos_threads = 0;
  std::string kokkos_backend;  ///< e.g. "OpenMP"
  std::string kokkos_reason;   ///< why Tessera gave it fewer than the BLAS's, else ""
};

/// Applies Tessera's policy on the first call and returns it (later calls return the same).
/// Unless the user set OPENBLAS_NUM_THREADS or OMP_NUM_THREADS, the BLAS gets the cores this
/// rank may run on, shared among the ranks of its node: min(cores it is bound to, cores of
/// the node / ranks on the node), at least 1. Host GEMMs call it before their first use, so
/// a BLAS that starts one thread per core does not put two ranks' threads on every core.
const HostThreads& host_threads();

}  // namespace tessera
