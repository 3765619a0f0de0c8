#pragma once
// Internal: elementwise host loops compiled for several x86-64 vector widths, the widest
// this CPU runs picked at run time (as OpenBLAS picks its kernels), so that a build for
// generic x86-64 (SSE2 only) still runs GELU 8 or 16 floats at a time. Every variant
// computes bit-identical results: the same IEEE operations in the same order, with no
// contraction into fused multiply-adds (-ffp-contract=off), so ranks on different CPUs
// keep identical replicas. Each function is one loop over n elements; callers cut their
// range into chunks and run the chunks in parallel on the host execution space.

#include <cstddef>
#include <vector>

namespace tessera::kernels {

struct HostLoops {
  const char* isa;  ///< "baseline", "avx2" or "avx512"
  /// y = x Phi(x), cdf = Phi(x).
  void (*gelu_forward)(const float* x, float* y, float* cdf, std::size_t n);
  /// dx = dy (Phi(x) + x phi(x)), given cdf = Phi(x).
  void (*gelu_backward)(const float* x, const float* cdf, const float* dy, float* dx, std::size_t n);
};

/// The variants compiled into this build that this CPU runs, narrowest first ("baseline"
/// is always there).
std::vector<const HostLoops*> host_loops_available();

/// The variant named `isa`; throws ConfigError when it is not compiled in or this CPU does
/// not run it.
const HostLoops& host_loops_named(const char* isa);

/// On the first call: TESSERA_HOST_ISA's variant if that is set (baseline, avx2, avx512),
/// else the widest available; later calls return the same.
const HostLoops& host_loops();

/// Reads TESSERA_HOST_ISA now, so that a name this build or CPU does not run stops a run
/// before its first step (not at its first elementwise loop), in every build. Where the
/// elementwise kernels run on a GPU the setting has no effect, and `note_unused` says so
/// in a warning.
void check_host_isa_setting(bool note_unused);

/// Elements per chunk that a parallel loop hands to one call.
constexpr std::size_t kHostLoopChunk = 8192;

}  // namespace tessera::kernels
