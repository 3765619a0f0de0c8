#include "kernels/gemm.hpp"

#include <cblas.h>

#include <string>

#include <tessera/core/error.hpp>
#include <tessera/core/host_threads.hpp>

namespace tessera::kernels {
namespace detail {
// Defined in gemm_cuda.cpp (CUDA builds) or below (host-only builds).
void gemm_device(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
                 float beta, float* c, int ldc);
}  // namespace detail

void gemm(Trans ta, Trans tb, float alpha, const View2D<const float>& a, const View2D<const float>& b, float beta,
          const View2D<float>& c) {
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
  if (m == 0 || n == 0) return;
  const auto lda = static_cast<int>(a.extent(1)), ldb = static_cast<int>(b.extent(1)),
             ldc = static_cast<int>(c.extent(1));
  if constexpr (memory_kind_of_space<DeviceMemorySpace>() == MemoryKind::Device) {
    detail::gemm_device(tA, tB, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
  } else {
    host_threads();  // the thread count is settled before the BLAS starts its threads
    cblas_sgemm(CblasRowMajor, tA ? CblasTrans : CblasNoTrans, tB ? CblasTrans : CblasNoTrans, m, n, k, alpha, a.data(),
                lda > 0 ? lda : 1, b.data(), ldb > 0 ? ldb : 1, beta, c.data(), ldc > 0 ? ldc : 1);
  }
}

}  // namespace tessera::kernels
