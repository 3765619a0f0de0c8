// Internal: the loops of host_loops.hpp, included once by each variant's translation unit,
// which defines TESSERA_HOST_LOOPS_ISA (its name, a C++ identifier) and is compiled for
// that instruction set. No include guard: each variant needs its own copy.
#include <Kokkos_Macros.hpp>  // what fast_math.hpp includes, here, outside the namespace below

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/host_loops.hpp"

namespace tessera::kernels::TESSERA_HOST_LOOPS_ISA {
namespace math {
namespace {
// A private copy of the math for this instruction set. Inline functions that a translation
// unit does not inline are emitted once per unit and merged by the linker, which could hand
// another unit this one's wider code; internal linkage keeps each copy to its own unit.
#include "kernels/fast_math.hpp"
}  // namespace
}  // namespace math
using math::tessera::kernels::fast_exp;
using math::tessera::kernels::fast_normal_cdf;

// The buffers of one call never overlap (a layer's activations, its output and the
// gradients are views of their own).
void gelu_forward(const float* __restrict x, float* __restrict y, float* __restrict cdf, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) {
    const float v = x[k];
    const float c = fast_normal_cdf(v);
    cdf[k] = c;
    y[k] = v * c;
  }
}

void gelu_backward(const float* __restrict x, const float* __restrict cdf, const float* __restrict dy,
                   float* __restrict dx, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) {
    const float v = x[k];
    const float pdf = 0.39894228040143268f * fast_exp(-0.5f * v * v);
    dx[k] = dy[k] * (cdf[k] + v * pdf);
  }
}

}  // namespace tessera::kernels::TESSERA_HOST_LOOPS_ISA
