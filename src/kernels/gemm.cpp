#include "kernels/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include <tessera/core/error.hpp>
#include <tessera/core/host_threads.hpp>

#include "core/log.hpp"
#include "core/range.hpp"

namespace tessera::kernels {
namespace detail {
// Defined in gemm_cuda.cpp (CUDA builds) or below (host-only builds).
void gemm_device(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
                 float beta, float* c, int ldc);
// C = op(A) op(B) + 1 bias^T in one cuBLASLt call; false where cuBLASLt has no algorithm for
// it (nothing was written then). gemm_cuda.cpp, or below in host-only builds.
bool gemm_bias_device(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                      const float* bias, float* c, int ldc);
// C = op(A) op(B) + beta C and row_sums = op(A) 1 in one cuBLASLt call; false where cuBLASLt
// has no algorithm for it (nothing was written then).
bool gemm_bias_grad_device(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                           float beta, float* c, int ldc, float* row_sums);
}  // namespace detail

namespace {
struct GemmShape {
  bool ta, tb;
  int m, n, k, lda, ldb, ldc;
};

/// A BLAS int: extents and row pitches past INT_MAX cannot be passed.
int blas_int(std::size_t v, const char* what) {
  if (v > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw Error(std::string("tessera::kernels::gemm: ") + what + " " + std::to_string(v) +
                    " exceeds the largest a BLAS call takes (2147483647)",
                __FILE__, __LINE__);
  return static_cast<int>(v);
}

/// The row pitch of a row-major matrix (a column slice of a wider one is padded: its rows
/// lie stride(0) apart, not extent(1)); at least 1, as BLAS and cuBLAS require.
int leading_dimension(const View2D<const float>& v, const char* what) {
  return std::max(1, blas_int(v.stride(0), what));
}

/// Checks that op(A) op(B) fits C and returns the BLAS arguments.
GemmShape gemm_shape(Trans ta, Trans tb, const View2D<const float>& a, const View2D<const float>& b,
                     const View2D<float>& c) {
  for (const auto* v : {&a, &b}) blas_int(std::max(v->extent(0), v->extent(1)), "a matrix extent");
  blas_int(std::max(c.extent(0), c.extent(1)), "a matrix extent");
  const bool tA = ta == Trans::Yes, tB = tb == Trans::Yes;
  const auto m = static_cast<int>(tA ? a.extent(1) : a.extent(0));
  const auto k = static_cast<int>(tA ? a.extent(0) : a.extent(1));
  const auto kb = static_cast<int>(tB ? b.extent(1) : b.extent(0));
  const auto n = static_cast<int>(tB ? b.extent(0) : b.extent(1));
  if (k != kb || static_cast<int>(c.extent(0)) != m || static_cast<int>(c.extent(1)) != n)
    throw Error("tessera::kernels::gemm: shapes do not match: op(A) is " + std::to_string(m) + "x" + std::to_string(k) +
                    ", op(B) is " + std::to_string(kb) + "x" + std::to_string(n) + ", C is " +
                    std::to_string(c.extent(0)) + "x" + std::to_string(c.extent(1)),
                __FILE__, __LINE__);
  return {tA,
          tB,
          m,
          n,
          k,
          leading_dimension(a, "A's row pitch"),
          leading_dimension(b, "B's row pitch"),
          leading_dimension(c, "C's row pitch")};
}

std::atomic<std::uint64_t> bias_in_epilogue{0}, bias_separate{0}, grad_in_epilogue{0}, grad_separate{0};

/// An epilogue switch read from the environment: 1 yes, 0 no, unset or empty the build's
/// default (yes where the GEMMs run in GPU memory: the bias's measured faster on an H200 and an
/// H100, the bias gradient's no slower on an H200, docs/strategies.md; a host build has no
/// epilogue to take); anything else a ConfigError that says what each value does.
bool epilogue_setting(const char* name, const char* what) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device;
  if (std::string(v) == "0") return false;
  if (std::string(v) == "1") return true;
  throw ConfigError(std::string(name) + "='" + v + "' is neither 0 nor 1; " + what);
}
}  // namespace

void gemm(Trans ta, Trans tb, float alpha, const View2D<const float>& a, const View2D<const float>& b, float beta,
          const View2D<float>& c) {
  const auto [tA, tB, m, n, k, lda, ldb, ldc] = gemm_shape(ta, tb, a, b, c);
  if (m == 0 || n == 0) return;
  if constexpr (memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device) {
    detail::gemm_device(tA, tB, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
  } else {
    host_threads();  // the thread count is settled before the BLAS starts its threads
    cblas_sgemm(CblasRowMajor, tA ? CblasTrans : CblasNoTrans, tB ? CblasTrans : CblasNoTrans, m, n, k, alpha, a.data(),
                lda, b.data(), ldb, beta, c.data(), ldc);
  }
}

// On a GPU as one flat range (coalesced: consecutive threads take consecutive elements of a
// row); on the host as rows, whose inner loop vectorizes.
void add_bias(const View2D<float>& y, const View1D<const float>& b) {
  const std::size_t rows = y.extent(0), cols = y.extent(1);
  if constexpr (memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device) {
    if (y.span_is_contiguous()) {
      const Kokkos::View<float*, DeviceMemorySpace, Kokkos::MemoryUnmanaged> flat_y(y.data(), y.size());
      Kokkos::parallel_for(
          "tessera::linear::bias", Range(0, rows * cols), KOKKOS_LAMBDA(std::size_t k) { flat_y(k) += b(k % cols); });
    } else {  // a column slice of a wider matrix (the GEMMs take those too)
      Kokkos::parallel_for(
          "tessera::linear::bias", Range(0, rows * cols),
          KOKKOS_LAMBDA(std::size_t k) { y(k / cols, k % cols) += b(k % cols); });
    }
  } else {
    Kokkos::parallel_for(
        "tessera::linear::bias", Range(0, rows), KOKKOS_LAMBDA(std::size_t i) {
          for (std::size_t j = 0; j < cols; ++j) y(i, j) += b(j);
        });
  }
}

bool gemm_bias_epilogue_requested() {
  static const bool requested =
      epilogue_setting("TESSERA_GEMM_BIAS_EPILOGUE",
                       "unset or 1 adds a Linear layer's bias in cuBLASLt's GEMM epilogue on a GPU, 0 in a pass of "
                       "its own after the GEMM");
  return requested;
}

bool gemm_bias_grad_epilogue_requested() {
  static const bool requested =
      epilogue_setting("TESSERA_GEMM_BIAS_GRAD_EPILOGUE",
                       "unset or 1 sums a Linear layer's bias gradient in the epilogue of cuBLASLt's weight-gradient "
                       "GEMM on a GPU, 0 in a GEMV of its own after it");
  return requested;
}

void check_gemm_bias_epilogue_setting(bool note_unused) {
  const bool bias = gemm_bias_epilogue_requested(), grad = gemm_bias_grad_epilogue_requested();
  if constexpr (memory_kind_of_space<DeviceMemorySpace>() != MemoryKind::Device) {
    // Only an explicit 1 comes here as requested: unset is no in a host build.
    for (const auto& [asked, name] :
         {std::pair{bias, "TESSERA_GEMM_BIAS_EPILOGUE"}, std::pair{grad, "TESSERA_GEMM_BIAS_GRAD_EPILOGUE"}})
      if (asked && note_unused)
        tessera::detail::logger().warn(
            "{}=1 has no effect in this build: its GEMMs run in host memory, with no epilogue", name);
  }
}

bool gemm_bias(Trans ta, Trans tb, const View2D<const float>& a, const View2D<const float>& b,
               const View1D<const float>& bias, const View2D<float>& c, BiasAdd how) {
  const auto [tA, tB, m, n, k, lda, ldb, ldc] = gemm_shape(ta, tb, a, b, c);
  if (bias.extent(0) != static_cast<std::size_t>(n))
    throw Error("tessera::kernels::gemm_bias: the bias has " + std::to_string(bias.extent(0)) +
                    " values for a C with " + std::to_string(n) + " columns",
                __FILE__, __LINE__);
  if (m == 0 || n == 0) return false;
  const bool epilogue = how == BiasAdd::Epilogue || (how == BiasAdd::Auto && gemm_bias_epilogue_requested());
  if constexpr (memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device) {
    if (epilogue && k > 0 &&
        detail::gemm_bias_device(tA, tB, m, n, k, a.data(), lda, b.data(), ldb, bias.data(), c.data(), ldc)) {
      bias_in_epilogue.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  gemm(ta, tb, 1.0f, a, b, 0.0f, c);
  add_bias(c, bias);
  bias_separate.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool gemm_bias_grad(Trans ta, Trans tb, const View2D<const float>& a, const View2D<const float>& b, float beta,
                    const View2D<float>& c, float g_beta, const View1D<float>& g, const View1D<const float>& ones,
                    BiasAdd how) {
  const auto [tA, tB, m, n, k, lda, ldb, ldc] = gemm_shape(ta, tb, a, b, c);
  if (g.extent(0) != static_cast<std::size_t>(m) || ones.extent(0) < static_cast<std::size_t>(k))
    throw Error("tessera::kernels::gemm_bias_grad: " + std::to_string(g.extent(0)) + " row sums and " +
                    std::to_string(ones.extent(0)) + " ones for an op(A) of " + std::to_string(m) + " x " +
                    std::to_string(k),
                __FILE__, __LINE__);
  const bool epilogue = how == BiasAdd::Epilogue || (how == BiasAdd::Auto && gemm_bias_grad_epilogue_requested());
  if constexpr (memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device) {
    if (epilogue && g_beta == 0.0f &&
        detail::gemm_bias_grad_device(tA, tB, m, n, k, a.data(), lda, b.data(), ldb, beta, c.data(), ldc, g.data())) {
      grad_in_epilogue.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  gemm(ta, tb, 1.0f, a, b, beta, c);
  // g = op(A) 1 through the GEMM path: a GEMV reading A row by row.
  gemm(ta, Trans::No, 1.0f, a, View2D<const float>(ones.data(), static_cast<std::size_t>(k), 1), g_beta,
       View2D<float>(g.data(), static_cast<std::size_t>(m), 1));
  grad_separate.fetch_add(1, std::memory_order_relaxed);
  return false;
}

GemmBiasCounts gemm_bias_counts() {
  return {bias_in_epilogue.load(std::memory_order_relaxed), bias_separate.load(std::memory_order_relaxed),
          grad_in_epilogue.load(std::memory_order_relaxed), grad_separate.load(std::memory_order_relaxed)};
}

}  // namespace tessera::kernels
