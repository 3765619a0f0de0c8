#pragma once
// Internal: single-precision GEMM on row-major matrices, dispatched on the memory space:
// CBLAS (OpenBLAS) for host memory, cuBLAS for CUDA memory.

#include <tessera/core/memory.hpp>

#include <cstdint>

namespace tessera::kernels {

enum class Trans { No, Yes };

/// C = alpha * op(A) * op(B) + beta * C, with op(X) = X or X^T. Shapes are checked.
void gemm(Trans ta, Trans tb, float alpha, const View2D<const float>& a, const View2D<const float>& b, float beta,
          const View2D<float>& c);

/// y(i, j) += b(j) for every row i of y.
void add_bias(const View2D<float>& y, const View1D<const float>& b);

/// Where gemm_bias adds its bias, and gemm_bias_grad sums its bias gradient.
enum class BiasAdd {
  Auto,      ///< Epilogue unless TESSERA_GEMM_BIAS_EPILOGUE=0 (gemm_bias_epilogue_requested()),
             ///< or for gemm_bias_grad TESSERA_GEMM_BIAS_GRAD_EPILOGUE=0
  Epilogue,  ///< in cuBLASLt's epilogue, where C is in CUDA memory and cuBLASLt has an
             ///< algorithm for the shape and alignment; otherwise Separate
  Separate,  ///< the GEMM, then a pass (or a GEMV) of its own
};

/// C = op(A) * op(B) + 1 bias^T: bias (one value per column of C) added to every row.
/// Returns whether the bias was added in the GEMM's epilogue.
bool gemm_bias(Trans ta, Trans tb, const View2D<const float>& a, const View2D<const float>& b,
               const View1D<const float>& bias, const View2D<float>& c, BiasAdd how = BiasAdd::Auto);

/// C = op(A) op(B) + beta C, and g = op(A) 1 + g_beta g: every row of op(A) summed over k.
/// With op(A) = dy^T and B = x, a Linear's weight gradient and its bias gradient. Where C is
/// in CUDA memory, cuBLASLt's bias-gradient epilogue (BGRADB) sums dy as the GEMM reads it,
/// if g_beta is 0 (the epilogue writes g; it adds nothing to it), g is 16-byte aligned, no
/// matrix has a single row or column and cuBLASLt has an algorithm for the shape. Otherwise
/// the GEMM, then a GEMV of op(A) with `ones` (at least k ones). Returns whether the epilogue
/// summed g.
bool gemm_bias_grad(Trans ta, Trans tb, const View2D<const float>& a, const View2D<const float>& b, float beta,
                    const View2D<float>& c, float g_beta, const View1D<float>& g, const View1D<const float>& ones,
                    BiasAdd how = BiasAdd::Auto);

/// How many gemm_bias calls so far added their bias in the epilogue, and how many in a pass
/// of their own; how many gemm_bias_grad calls summed their bias gradient in the epilogue, and
/// how many in a GEMV of its own (benchmarks report which way a run went).
struct GemmBiasCounts {
  std::uint64_t epilogue = 0, separate = 0;
  std::uint64_t grad_epilogue = 0, grad_separate = 0;
};
GemmBiasCounts gemm_bias_counts();

/// Whether BiasAdd::Auto asks for the epilogue: TESSERA_GEMM_BIAS_EPILOGUE, read once
/// (1: yes; 0: no; unset or empty: yes in a build whose GEMMs run in GPU memory, no in a
/// host build; anything else is a ConfigError).
bool gemm_bias_epilogue_requested();

/// Whether BiasAdd::Auto asks gemm_bias_grad for the epilogue: TESSERA_GEMM_BIAS_GRAD_EPILOGUE,
/// read once, as above.
bool gemm_bias_grad_epilogue_requested();

/// Reads TESSERA_GEMM_BIAS_EPILOGUE and TESSERA_GEMM_BIAS_GRAD_EPILOGUE now, so that a bad
/// value stops a run before its first step; with note_unused, warns where either asks for the
/// epilogue in a build without CUDA memory.
void check_gemm_bias_epilogue_setting(bool note_unused);

}  // namespace tessera::kernels
