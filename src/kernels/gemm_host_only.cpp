// Host-only builds: the default memory space is host memory, so device GEMM is never reached.
#include <tessera/core/error.hpp>

namespace tessera::kernels::detail {
void gemm_device(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int) {
  throw NotCompiledError("GEMM on device memory needs cuBLAS; rebuild with the CUDA toolkit available");
}
bool gemm_bias_device(bool, bool, int, int, int, const float*, int, const float*, int, const float*, float*, int) {
  throw NotCompiledError("GEMM on device memory needs cuBLAS; rebuild with the CUDA toolkit available");
}
bool gemm_bias_grad_device(bool, bool, int, int, int, const float*, int, const float*, int, float, float*, int,
                           float*) {
  throw NotCompiledError("GEMM on device memory needs cuBLAS; rebuild with the CUDA toolkit available");
}
}  // namespace tessera::kernels::detail
