#include <tessera/core/host_threads.hpp>
#include <tessera/core/session.hpp>

#include <sched.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "core/kokkos_start.hpp"

#if TESSERA_HAVE_OPENBLAS_THREADS
#include <cblas.h>
#endif

namespace tessera {
namespace detail {
const char* blas_threads_variable() noexcept {
  for (const char* var : {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') return var;
  return nullptr;
}

bool blas_runs_own_threads() noexcept {
#if TESSERA_HAVE_OPENBLAS_THREADS
  return openblas_get_parallel() == 1;  // 0: sequential, 1: its own threads, 2: OpenMP's
#else
  return false;
#endif
}
}  // namespace detail

namespace {
int cores_allowed() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

HostThreads choose() {
  HostThreads h;
  if (detail::kokkos_host_is_threaded() && Kokkos::is_initialized()) {
    h.kokkos_threads = Kokkos::DefaultHostExecutionSpace().concurrency();
    h.kokkos_backend = Kokkos::DefaultHostExecutionSpace::name();
  }
  if (const char* var = detail::blas_threads_variable()) {
    const char* v = std::getenv(var);
    const int asked = std::max(1, std::atoi(v));
    h.threads = asked;
    h.reason = std::string(var) + "=" + v;
#if TESSERA_HAVE_OPENBLAS_THREADS
    h.threads = openblas_get_num_threads();
    // OpenBLAS starts no more threads than the cores this process may run on (mpiexec binds
    // a rank to one core by default).
    if (h.threads < asked) {
      const int allowed = cores_allowed();
      h.reason += allowed > 0 && allowed <= h.threads
                      ? ", capped by the " + std::to_string(allowed) + (allowed == 1 ? " core" : " cores") +
                            " this rank may run on"
                      : ", capped by OpenBLAS";
    }
#endif
    return h;
  }
  const int online = std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  const int allowed = cores_allowed() > 0 ? cores_allowed() : online;
  const int ranks = Session::active() ? std::max(1, Session::current().local_size()) : 1;
  h.threads = Session::active() ? Session::current().cores() : std::max(1, std::min(allowed, online));
  h.reason = std::to_string(online) + " cores / " + std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") +
             " on this node";
  if (allowed < online) h.reason += ", " + std::to_string(allowed) + " bound to this rank";
#if TESSERA_HAVE_OPENBLAS_THREADS
  openblas_set_num_threads(h.threads);
#else
  h.threads = 0;
  h.reason = "this BLAS is not OpenBLAS: its own default; set OMP_NUM_THREADS to choose";
#endif
  return h;
}
}  // namespace

const HostThreads& host_threads() {
  static std::once_flag once;
  static HostThreads chosen;
  std::call_once(once, [] {
    chosen = choose();
    if (chosen.kokkos_threads > 0 && detail::kokkos_threads_left_to_blas())
      chosen.kokkos_reason = "OpenBLAS's own threads have the cores";
  });
  return chosen;
}

}  // namespace tessera
