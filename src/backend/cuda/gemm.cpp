// cuBLASLt / cuBLAS matrix products; see gemm.hpp. kiln is row-major and
// cuBLAS column-major: a row-major C[m,n] is a column-major C^T[n,m], and
// C^T = op(B)^T op(A)^T, so every call passes B as the first operand and A as
// the second, with m and n swapped.
#include "backend/cuda/gemm.hpp"

#include <string>

#include "backend/cuda/check.hpp"

namespace kiln::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  // NVIDIA's recommendation for Hopper
constexpr size_t kMaxPlans = 4096;             // distinct shapes cached before the cache restarts

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F64: return CUDA_R_64F;
    default: return CUDA_R_32F;
  }
}

// The largest power of two (up to 256) that divides every address: cuBLASLt
// algorithms may assume 256-byte alignment unless told otherwise, and row
// views of a tensor start anywhere.
uint32_t common_alignment(const void *a, const void *b, const void *c) {
  uintptr_t bits = uintptr_t(a) | uintptr_t(b) | uintptr_t(c) | 256u;
  return uint32_t(bits & (~bits + 1));
}

// "in gemm 128x32x784 f32", for error messages.
std::string gemm_text(DType t, int64_t m, int64_t n, int64_t k) {
  return "in gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " " + dtype_name(t);
}

}  // namespace

struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool legacy = false;  // cuBLASLt found no algorithm (or f64): use cublasGemmEx

  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

Gemm::Gemm(cudaStream_t stream) {
  try {
    KILN_CUBLAS_TRY(cublasLtCreate(&lt_), "creating the cuBLASLt handle");
    KILN_CUBLAS_TRY(cublasCreate(&blas_), "creating the cuBLAS handle");
    KILN_CUDA_TRY(cudaMalloc(&workspace_, kWorkspaceBytes), "the 32 MiB cuBLAS workspace");
    KILN_CUBLAS_TRY(cublasSetStream(blas_, stream), "cuBLAS set-up");
    // One workspace serves both handles: every product is ordered on `stream`.
    KILN_CUBLAS_TRY(cublasSetWorkspace(blas_, workspace_, kWorkspaceBytes), "cuBLAS set-up");
    KILN_CUBLAS_TRY(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH), "cuBLAS set-up");  // no TF32
  } catch (...) {
    release();
    throw;
  }
}

Gemm::~Gemm() { release(); }

void Gemm::release() noexcept {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (blas_) cublasDestroy(blas_);
  if (lt_) cublasLtDestroy(lt_);
  workspace_ = nullptr, blas_ = nullptr, lt_ = nullptr;
}

std::shared_ptr<const Gemm::Plan> Gemm::plan(const Key &key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = plans_.find(key);
  if (found != plans_.end()) return found->second;

  const auto [t, trans_a, trans_b, m, n, k, align] = key;
  auto what = [&] { return gemm_text(t, m, n, k); };
  auto p = std::make_shared<Plan>();
  if (t == DType::F64) {
    p->legacy = true;
  } else {
    const cudaDataType_t type = cuda_type(t);
    const cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    KILN_CUBLAS_TRY(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), what());
    KILN_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first),
                    what());
    KILN_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second),
                    what());
    // Stored shapes (column-major rows, cols, leading dimension) before op.
    KILN_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->a, type, trans_b ? k : n, trans_b ? n : k, trans_b ? k : n), what());
    KILN_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->b, type, trans_a ? m : k, trans_a ? k : m, trans_a ? m : k), what());
    KILN_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->c, type, n, m, n), what());

    cublasLtMatmulPreference_t pref = nullptr;
    KILN_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref), what());
    uint64_t workspace = kWorkspaceBytes;
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                            sizeof workspace);
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align);
    cublasLtMatmulHeuristicResult_t result{};
    int found_algos = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatmulAlgoGetHeuristic(lt_, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, &found_algos);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED)
      fail_cublas(s, "cublasLtMatmulAlgoGetHeuristic", what());
    p->legacy = s != CUBLAS_STATUS_SUCCESS || found_algos == 0;
    p->algo = result.algo;
  }
  if (plans_.size() >= kMaxPlans) plans_.clear();  // plans in flight stay alive through their shared_ptr
  plans_.emplace(key, p);
  return p;
}

void Gemm::run(const Launch &L, DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
               const void *a, const void *b, double beta, void *c) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // an empty sum: C = beta C (cuBLAS rejects zero-sized layouts)
    if (beta == 0.0) fill(L, t, m * n, c, 0.0);
    else scalar(L, BinaryOp::Mul, t, m * n, c, beta, c);
    return;
  }
  check(t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16, KILN_ERROR_NOT_SUPPORTED,
        std::string("gemm on CUDA needs a float dtype, not ") + dtype_name(t));
  auto what = [&] { return gemm_text(t, m, n, k); };
  const std::shared_ptr<const Plan> p = plan({t, trans_a, trans_b, m, n, k, common_alignment(a, b, c)});
  const float alpha_f = float(alpha), beta_f = float(beta);
  const void *alpha_p = t == DType::F64 ? static_cast<const void *>(&alpha) : &alpha_f;
  const void *beta_p = t == DType::F64 ? static_cast<const void *>(&beta) : &beta_f;
  if (!p->legacy) {
    KILN_CUBLAS_TRY(cublasLtMatmul(lt_, p->desc, alpha_p, b, p->a, a, p->b, beta_p, c, p->c, c, p->c, &p->algo,
                                   workspace_, kWorkspaceBytes, L.stream),
                    what());
    return;
  }
  const cudaDataType_t type = cuda_type(t);
  KILN_CUBLAS_TRY(cublasGemmEx_64(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
                                  k, alpha_p, b, type, trans_b ? k : n, a, type, trans_a ? m : k, beta_p, c, type, n,
                                  t == DType::F64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  what());
}

}  // namespace kiln::cuda
