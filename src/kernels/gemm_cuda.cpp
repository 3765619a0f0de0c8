// cuBLAS for matrices in CUDA memory (built when the CUDA toolkit is present). cuBLAS is
// column-major: a row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <Kokkos_Core.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include <tessera/core/error.hpp>

#include "core/cuda_check.hpp"

namespace tessera::kernels::detail {
namespace {
/// Kokkos' stream: GEMMs and elementwise kernels run in order, with no implicit
/// synchronisation through the legacy default stream.
cudaStream_t kokkos_stream() {
#ifdef KOKKOS_ENABLE_CUDA
  return Kokkos::DefaultExecutionSpace().cuda_stream();
#else
  return nullptr;
#endif
}

cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    const cublasStatus_t rc = cublasCreate(&created);
    if (rc != CUBLAS_STATUS_SUCCESS)
      throw Error("cublasCreate failed: " + std::string(cublasGetStatusString(rc)), __FILE__, __LINE__);
    cublasSetStream(created, kokkos_stream());
    return created;
  }();
  return h;
}

void check_lt(cublasStatus_t rc, const char* call, int line) {
  if (rc != CUBLAS_STATUS_SUCCESS) {
    const std::string text(call);
    throw Error(text.substr(0, text.find('(')) + " failed: " + cublasGetStatusString(rc), __FILE__, line);
  }
}
#define TESSERA_CHECK_LT(call) check_lt((call), #call, __LINE__)

/// The largest power of two, up to 256, that divides the address: cuBLASLt's heuristic is
/// told each operand's alignment, as it assumes 256 bytes otherwise.
std::uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

/// One GEMM-with-epilogue shape for cuBLASLt (a bias added, or a bias gradient summed): its
/// descriptors and the algorithm its heuristic chose, made once per epilogue, shape and
/// alignment and kept for the process (a training step repeats a handful of shapes).
/// `supported` is false where the heuristic had no algorithm.
struct BiasPlan {
  bool supported = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;
};

/// Workspace cuBLASLt's algorithms may use (split-K partial sums): 32 MiB, what cuBLAS
/// recommends on Hopper. Allocated at the first GEMM with a bias, freed at Kokkos::finalize.
constexpr std::size_t kLtWorkspaceBytes = std::size_t{32} << 20;

struct LtState {
  std::mutex mutex;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<std::tuple<int, bool, bool, int, int, int, int, int, int, std::uint32_t, std::uint32_t, std::uint32_t,
                      std::uint32_t>,
           BiasPlan>
      plans;
};

LtState& lt_state() {
  static LtState state;
  return state;
}

/// Fills in the plan of one shape (already in the plans, so that whatever it creates is
/// destroyed at finalize even if a step here throws). Row-major C = op(A) op(B) is column-major
/// C^T = op(B)^T op(A)^T, as in gemm_device: cuBLASLt's first operand is our B, its second our
/// A, and its D has n rows (C's columns) and m columns (C's rows). The BIAS epilogue adds a
/// vector of n to every column of D (a row of C); BGRADB sums cuBLASLt's second operand,
/// op(A)^T (k x m), over k into a vector of m: every row of op(A) summed. Any heuristic failure
/// leaves the plan unsupported: the caller then takes the separate pass, as PyTorch falls
/// back from cuBLASLt.
void fill_bias_plan(BiasPlan& plan, cublasLtHandle_t lt, cublasLtEpilogue_t epilogue, bool ta, bool tb, int m, int n,
                    int k, int lda, int ldb, int ldc, std::uint32_t align_a, std::uint32_t align_b,
                    std::uint32_t align_c, const float* vector) {
  TESSERA_CHECK_LT(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));  // no TF32
  const cublasOperation_t op_first = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  TESSERA_CHECK_LT(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  TESSERA_CHECK_LT(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
  TESSERA_CHECK_LT(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  // The heuristic reads the vector's alignment from its pointer (it dereferences nothing).
  TESSERA_CHECK_LT(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector, sizeof(vector)));
  // Stored shapes, column-major: our B is k x n row-major (n x k column-major), or n x k when
  // transposed (k x n); our A likewise with m; C is n x m.
  TESSERA_CHECK_LT(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_32F, tb ? k : n, tb ? n : k, ldb));
  TESSERA_CHECK_LT(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_32F, ta ? m : k, ta ? k : m, lda));
  TESSERA_CHECK_LT(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_32F, n, m, ldc));

  cublasLtMatmulPreference_t pref = nullptr;
  TESSERA_CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  const std::uint64_t workspace = kLtWorkspaceBytes;
  // cuBLASLt's A is our B and its B our A.
  const std::uint32_t alignments[] = {align_b, align_a, align_c, align_c};
  const cublasLtMatmulPreferenceAttributes_t alignment_attributes[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  TESSERA_CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                        sizeof(workspace)));
  for (int i = 0; i < 4; ++i)
    TESSERA_CHECK_LT(
        cublasLtMatmulPreferenceSetAttribute(pref, alignment_attributes[i], &alignments[i], sizeof(alignments[i])));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t rc =
      cublasLtMatmulAlgoGetHeuristic(lt, plan.desc, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (rc == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    plan.supported = true;
    plan.algo = result.algo;
    plan.workspace = result.workspaceSize;
  }
}
}  // namespace

void gemm_device(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
                 float beta, float* c, int ldc) {
  const cublasStatus_t rc = cublasSgemm(handle(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
                                        k, &alpha, b, ldb, a, lda, &beta, c, ldc);
  if (rc != CUBLAS_STATUS_SUCCESS)
    throw Error("cublasSgemm failed: " + std::string(cublasGetStatusString(rc)), __FILE__, __LINE__);
}

namespace {
/// C = op(A) op(B) + beta C in one cuBLASLt call with `epilogue`, whose vector (the bias it
/// adds, or the bias gradient it writes) is `vector`; false where that cannot be (nothing was
/// written then).
bool lt_matmul(cublasLtEpilogue_t epilogue, bool ta, bool tb, int m, int n, int k, const float* a, int lda,
               const float* b, int ldb, float beta, float* c, int ldc, const float* vector) {
  // The epilogue reads or writes its vector in 16-byte pieces; a vector off that alignment (a
  // parameter packed behind one of odd length) takes the separate pass. So does a matrix with
  // one row or column, for which cuBLASLt's heuristic reports an invalid value (as PyTorch
  // found).
  const std::uint32_t align_vector = alignment_of(vector);
  if (align_vector < 16 || m < 2 || n < 2 || k < 2) return false;
  LtState& lt = lt_state();
  const std::lock_guard<std::mutex> lock(lt.mutex);  // the plans, and the vector pointer set in a shared descriptor
  if (lt.handle == nullptr) {
    void* workspace = nullptr;
    TESSERA_CHECK_CUDA(cudaMalloc(&workspace, kLtWorkspaceBytes));
    cublasLtHandle_t handle = nullptr;
    if (const cublasStatus_t rc = cublasLtCreate(&handle); rc != CUBLAS_STATUS_SUCCESS) {
      cudaFree(workspace);
      check_lt(rc, "cublasLtCreate", __LINE__);
    }
    lt.handle = handle;
    lt.workspace = workspace;
    Kokkos::push_finalize_hook([] {
      LtState& s = lt_state();
      const std::lock_guard<std::mutex> l(s.mutex);
      cudaDeviceSynchronize();  // finalize hooks run before Kokkos' own fence: no GEMM may still use the workspace
      for (auto& [key, plan] : s.plans) {  // a plan whose making threw has some left null
        for (cublasLtMatrixLayout_t layout : {plan.a, plan.b, plan.c})
          if (layout != nullptr) cublasLtMatrixLayoutDestroy(layout);
        if (plan.desc != nullptr) cublasLtMatmulDescDestroy(plan.desc);
      }
      s.plans.clear();
      cudaFree(s.workspace);
      cublasLtDestroy(s.handle);
      s.workspace = nullptr;
      s.handle = nullptr;
    });
  }
  const std::uint32_t align_a = alignment_of(a), align_b = alignment_of(b), align_c = alignment_of(c);
  const auto key = std::make_tuple(static_cast<int>(epilogue), ta, tb, m, n, k, lda, ldb, ldc, align_a, align_b,
                                   align_c, align_vector);
  auto found = lt.plans.find(key);
  if (found == lt.plans.end()) {
    found = lt.plans.emplace(key, BiasPlan{}).first;
    fill_bias_plan(found->second, lt.handle, epilogue, ta, tb, m, n, k, lda, ldb, ldc, align_a, align_b, align_c,
                   vector);
  }
  BiasPlan& plan = found->second;
  if (!plan.supported) return false;
  TESSERA_CHECK_LT(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector, sizeof(vector)));
  const float alpha = 1.0f;
  const cublasStatus_t rc = cublasLtMatmul(lt.handle, plan.desc, &alpha, b, plan.a, a, plan.b, &beta, c, plan.c, c,
                                           plan.c, &plan.algo, lt.workspace, plan.workspace, kokkos_stream());
  if (rc == CUBLAS_STATUS_NOT_SUPPORTED || rc == CUBLAS_STATUS_INVALID_VALUE || rc == CUBLAS_STATUS_ARCH_MISMATCH) {
    // Refused before anything ran (the heuristic's algorithm may still be turned down at
    // the call): the separate pass, from now on for this shape.
    plan.supported = false;
    return false;
  }
  check_lt(rc, "cublasLtMatmul", __LINE__);
  return true;
}
}  // namespace

bool gemm_bias_device(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                      const float* bias, float* c, int ldc) {
  return lt_matmul(CUBLASLT_EPILOGUE_BIAS, ta, tb, m, n, k, a, lda, b, ldb, 0.0f, c, ldc, bias);
}

bool gemm_bias_grad_device(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                           float beta, float* c, int ldc, float* row_sums) {
  return lt_matmul(CUBLASLT_EPILOGUE_BGRADB, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc, row_sums);
}
}  // namespace tessera::kernels::detail
