#pragma once
// Internal: GELU's forward and backward as Kokkos kernels over flat arrays, what a GELU runs
// on a GPU (on the host the loops of host_loops.hpp run instead, which keep Phi(x) from
// forward). They are shaped so that memory, not arithmetic, sets their speed on a GPU:
// - one e^(-x^2/2) serves both Phi(x) and the density in backward (computing them apart took
//   two exps per element);
// - on a CUDA device that exp and Abramowitz & Stegun's division are the hardware's
//   approximate ones (__expf, __fdividef), a few instructions where fast_exp and an IEEE
//   division take dozens (fast_exp was written so that host loops vectorize). Their errors are
//   of the order of A & S's own 1.5e-7; tests/unit/test_nn.cpp holds the kernels to the double
//   functions within 1e-6 relative, on the GPU with these units and on the host with fast_exp;
// - each work item takes four consecutive elements, read and written as 16-byte vectors,
//   where every array is 16-byte aligned; the elements after the last whole four, and every
//   element of a misaligned array, take an item each.
// Written for any execution space, so that the unit tests also run them on the host.

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>

#include "core/range.hpp"
#include "kernels/fast_math.hpp"

namespace tessera::kernels::gelu {

namespace detail {
/// Four floats that load and store as one 16-byte access (CUDA's float4 where it compiles).
#if defined(__CUDACC__)
using Quad = float4;
#else
struct alignas(16) Quad {
  float x, y, z, w;
};
#endif

/// Whether the kernels take four elements per work item: every array 16-byte aligned.
template <class... T>
bool four_at_a_time(const T*... arrays) {
  return ((reinterpret_cast<std::uintptr_t>(arrays) % 16 == 0) && ...);
}

/// e^x for x <= 0: the GPU's exp2 unit on a CUDA device, fast_exp elsewhere.
KOKKOS_INLINE_FUNCTION float exp_non_positive(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return fast_exp(x);
#endif
}

/// 1 / d for d >= 1.
KOKKOS_INLINE_FUNCTION float reciprocal(float d) {
#if defined(__CUDA_ARCH__)
  return __fdividef(1.0f, d);
#else
  return 1.0f / d;
#endif
}

/// Phi(v), given e = e^(-v^2/2): Abramowitz & Stegun's erfc of |v| / sqrt 2, as fast_normal_cdf.
KOKKOS_INLINE_FUNCTION float normal_cdf(float v, float e) {
  const float a = (v < 0.0f ? -v : v) * 0.70710678118654752f;
  const float tail = 0.5f * kernels::detail::erfc_as_t(reciprocal(1.0f + kernels::detail::kErfcP * a), e);
  return v < 0.0f ? tail : 1.0f - tail;
}
}  // namespace detail

/// x Phi(x). NaN stays NaN.
KOKKOS_INLINE_FUNCTION float forward_value(float v) {
  return v * detail::normal_cdf(v, detail::exp_non_positive(-0.5f * v * v));
}

/// dy d(x Phi(x))/dx = dy (Phi(x) + x phi(x)), phi the normal density.
KOKKOS_INLINE_FUNCTION float backward_value(float v, float dy) {
  const float e = detail::exp_non_positive(-0.5f * v * v);
  return dy * (detail::normal_cdf(v, e) + v * (0.39894228040143268f * e));
}

/// Queues y[i] = GELU(x[i]) for i in [0, n) on `space`. The arrays must not overlap.
template <class Space>
void forward(const Space& space, const float* x, float* y, std::size_t n) {
  const std::size_t quads = detail::four_at_a_time(x, y) ? n / 4 : 0;
  const std::size_t rest = n - 4 * quads;
  Kokkos::parallel_for(
      "tessera::gelu", RangeOn<Space>(space, 0, quads + rest), KOKKOS_LAMBDA(std::size_t w) {
        if (w < quads) {
          detail::Quad q = reinterpret_cast<const detail::Quad*>(x)[w];
          q.x = forward_value(q.x);
          q.y = forward_value(q.y);
          q.z = forward_value(q.z);
          q.w = forward_value(q.w);
          reinterpret_cast<detail::Quad*>(y)[w] = q;
        } else {
          const std::size_t i = 4 * quads + (w - quads);
          y[i] = forward_value(x[i]);
        }
      });
}

/// Queues dx[i] = dy[i] GELU'(x[i]) for i in [0, n) on `space`. dx must not overlap x or dy.
template <class Space>
void backward(const Space& space, const float* x, const float* dy, float* dx, std::size_t n) {
  const std::size_t quads = detail::four_at_a_time(x, dy, dx) ? n / 4 : 0;
  const std::size_t rest = n - 4 * quads;
  Kokkos::parallel_for(
      "tessera::gelu::backward", RangeOn<Space>(space, 0, quads + rest), KOKKOS_LAMBDA(std::size_t w) {
        if (w < quads) {
          const detail::Quad v = reinterpret_cast<const detail::Quad*>(x)[w];
          const detail::Quad g = reinterpret_cast<const detail::Quad*>(dy)[w];
          detail::Quad out;
          out.x = backward_value(v.x, g.x);
          out.y = backward_value(v.y, g.y);
          out.z = backward_value(v.z, g.z);
          out.w = backward_value(v.w, g.w);
          reinterpret_cast<detail::Quad*>(dx)[w] = out;
        } else {
          const std::size_t i = 4 * quads + (w - quads);
          dx[i] = backward_value(x[i], dy[i]);
        }
      });
}

}  // namespace tessera::kernels::gelu
