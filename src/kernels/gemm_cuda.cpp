// cuBLAS for matrices in CUDA memory (built when the CUDA toolkit is present). cuBLAS is
// column-major: a row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T.
#include <cublas_v2.h>
#include <Kokkos_Core.hpp>

#include <mutex>
#include <string>

#include <tessera/core/error.hpp>

namespace tessera::kernels::detail {
namespace {
cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    const cublasStatus_t rc = cublasCreate(&created);
    if (rc != CUBLAS_STATUS_SUCCESS)
      throw Error("cublasCreate failed: " + std::string(cublasGetStatusString(rc)), __FILE__, __LINE__);
#ifdef KOKKOS_ENABLE_CUDA
    // On the stream of Kokkos' kernels, so GEMMs and elementwise kernels run in order with
    // no implicit synchronisation through the legacy default stream.
    cublasSetStream(created, Kokkos::DefaultExecutionSpace().cuda_stream());
#endif
    return created;
  }();
  return h;
}
}  // namespace

void gemm_device(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
                 float beta, float* c, int ldc) {
  const cublasStatus_t rc = cublasSgemm(handle(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
                                        k, &alpha, b, ldb, a, lda, &beta, c, ldc);
  if (rc != CUBLAS_STATUS_SUCCESS)
    throw Error("cublasSgemm failed: " + std::string(cublasGetStatusString(rc)), __FILE__, __LINE__);
}
}  // namespace tessera::kernels::detail
