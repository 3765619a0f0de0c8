#pragma once
// Internal: single-precision GEMM on row-major matrices, dispatched on the memory space:
// CBLAS (OpenBLAS) for host memory, cuBLAS for CUDA memory.

#include <tessera/core/memory.hpp>

namespace tessera::kernels {

enum class Trans { No, Yes };

/// C = alpha * op(A) * op(B) + beta * C, with op(X) = X or X^T. Shapes are checked.
void gemm(Trans ta, Trans tb, float alpha, const View2D<const float>& a, const View2D<const float>& b, float beta,
          const View2D<float>& c);

}  // namespace tessera::kernels
