#pragma once
// Internal: an elementwise loop that also sums one float per element (e.g. an optimizer
// update that reports its gradients' squared norm in the same pass over memory), shaped so
// that both vectorize on the host: consecutive chunks, each an `omp simd` loop whose sum is
// its reduction. The pragma lets the compiler reorder that sum and nothing else, so every
// element is computed exactly as in a scalar loop. On a GPU every element is its own chunk.
// simdlen(8): left to itself, Clang sizes the vectors by the double sum (2 lanes in SSE2)
// and runs AdamW at half GCC's speed; 8 lanes make it match GCC's (measured in
// tessera-bench-train's optimizer_only), and GCC's is unchanged.

#include <Kokkos_Core.hpp>

#include <cstddef>

#include <tessera/core/memory.hpp>

#include "core/range.hpp"

#if !defined(__CUDA_ARCH__) && (defined(__GNUC__) || defined(__clang__))
#define TESSERA_SIMD_SUM _Pragma("omp simd simdlen(8) reduction(+ : tessera_sum)")
#else
#define TESSERA_SIMD_SUM
#endif

namespace tessera::kernels {

namespace detail {
/// The loop body of for_each_summing: one chunk of consecutive elements per iteration.
template <class F>
struct SummingChunks {
  static constexpr std::size_t chunk = memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Host ? 4096 : 1;
  F f;
  std::size_t begin, end;
  std::size_t stride = 0;  // on a GPU, the elements between one thread's (0: one each)
  std::size_t chunks() const { return end > begin ? (end - begin + chunk - 1) / chunk : 0; }
  /// The work items: one per chunk, or on a GPU `threads` (when fewer) that stride over them.
  std::size_t items(std::size_t threads) {
    const std::size_t n = chunks();
    if (chunk != 1 || threads == 0 || threads >= n) return n;
    stride = threads;
    return threads;
  }
  KOKKOS_INLINE_FUNCTION void operator()(std::size_t c, double& acc) const {
    if constexpr (chunk == 1) {
      if (stride == 0) {
        if (begin + c < end) acc += static_cast<double>(f(begin + c));
      } else {
        for (std::size_t i = begin + c; i < end; i += stride) acc += static_cast<double>(f(i));
      }
    } else {
      const std::size_t lo = begin + c * chunk;
      const std::size_t hi = end - lo < chunk ? end : lo + chunk;
      // A copy of its own: the loop's stores (through the views' pointers) cannot then change
      // the views it reads those pointers from. Without it, where the functor is shared by the
      // threads of a parallel region (Kokkos' OpenMP backend), the compiler must reload them
      // after every store and runs the loop one element at a time: AdamW over 8.4 M
      // parameters took 16.1 ms instead of 4.3 on one thread.
      const F local = f;
      double tessera_sum = 0.0;
      TESSERA_SIMD_SUM
      for (std::size_t i = lo; i < hi; ++i) tessera_sum += static_cast<double>(local(i));
      acc += tessera_sum;
    }
  }
};
}  // namespace detail

/// Queues f(i) for every i in [begin, end) on `space` and the sum (in double) of what it
/// returns into `sum`; returns at once where the space runs asynchronously (a GPU). On a
/// GPU, `threads` > 0 runs it on at most that many threads (Optimizer::limit_threads).
template <class F>
void for_each_summing(const char* label, const Kokkos::DefaultExecutionSpace& space, std::size_t begin, std::size_t end,
                      const F& f, const Kokkos::View<double, DeviceMemorySpace>& sum, std::size_t threads = 0) {
  detail::SummingChunks<F> body{f, begin, end};
  const std::size_t items = body.items(threads);
  Kokkos::parallel_reduce(label, Range(space, 0, items), body, sum);
}

/// The same on the default instance, waiting for the sum and returning it.
template <class F>
double for_each_summing(const char* label, std::size_t begin, std::size_t end, const F& f) {
  const detail::SummingChunks<F> body{f, begin, end};
  double total = 0;
  Kokkos::parallel_reduce(label, Range(0, body.chunks()), body, total);
  return total;
}

}  // namespace tessera::kernels
