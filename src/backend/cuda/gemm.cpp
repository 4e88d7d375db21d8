// cuBLASLt / cuBLAS matrix products; see gemm.hpp. kiln is row-major and
// cuBLAS column-major: a row-major C[m,n] is a column-major C^T[n,m], and
// C^T = op(B)^T op(A)^T, so every call passes B as the first operand and A as
// the second, with m and n swapped (planning/lt_layout.hpp derives every
// layout, and the CPU tests check it). An epilogue's "rows of D" are
// therefore the row-major output's columns (n), and its "columns of D" the
// rows (m).
#include "backend/cuda/gemm.hpp"

#include <string>

#include "backend/cuda/check.hpp"
#include "backend/cuda/planning/lt_layout.hpp"

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

// TF32 only where asked and only for f32 data; f16/bf16 always accumulate in
// full f32.
cublasComputeType_t compute_type(DType t, MathMode math) {
  return t == DType::F32 && math == MathMode::Tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
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

template <class V> void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V &value,
                                 const std::string &what) {
  KILN_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof value), what);
}

}  // namespace

struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool legacy = false;  // cuBLASLt found no algorithm (or f64): use cublasGemmEx

  Plan() = default;
  Plan(const Plan &) = delete;
  Plan &operator=(const Plan &) = delete;
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }

  // Describes the product (with `epilogue` when not null) and asks the
  // heuristic for an algorithm; false when there is none.
  bool build(cublasLtHandle_t lt, const GemmArgs &g, uint32_t align, const Epilogue *epilogue) {
    auto what = [&] { return gemm_text(g.t, g.m, g.n, g.k); };
    const cudaDataType_t type = cuda_type(g.t);
    const LtProduct p = lt_product(g);
    const cublasOperation_t op_first = p.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = p.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
    KILN_CUBLAS_TRY(cublasLtMatmulDescCreate(&desc, compute_type(g.t, g.math), CUDA_R_32F), what());
    set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, op_first, what());
    set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, op_second, what());
    if (epilogue) {
      set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue->kind, what());
      if (epilogue->bias) set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, epilogue->bias, what());
      if (epilogue->aux) {
        set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, epilogue->aux, what());
        set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, epilogue->aux_ld, what());
      }
    }
    // Stored shapes (column-major rows, cols, leading dimension) before op.
    KILN_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&a, type, p.first.rows, p.first.cols, p.first.ld), what());
    KILN_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&b, type, p.second.rows, p.second.cols, p.second.ld), what());
    KILN_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&c, type, p.out.rows, p.out.cols, p.out.ld), what());

    cublasLtMatmulPreference_t pref = nullptr;
    KILN_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref), what());
    uint64_t workspace = kWorkspaceBytes;
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;  // see gemm.hpp
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                            sizeof workspace);
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                               sizeof schemes);
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    // No algorithm (NOT_SUPPORTED, or none found) means the caller's
    // fallback: plain cuBLAS and kernels. Anything else, INVALID_VALUE
    // included, says kiln described the product wrongly (a layout, a
    // pointer, an attribute): an error to report, not a reason to fall back
    // quietly.
    if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED)
      fail_cublas(s, "cublasLtMatmulAlgoGetHeuristic", what() + (epilogue ? " with an epilogue" : ""));
    algo = result.algo;
    return s == CUBLAS_STATUS_SUCCESS && found > 0;
  }
};

// A planned product with its operands and epilogue bound (gemm.hpp).
class Gemm::Fused {
 public:
  Plan plan;
  GemmArgs args;
};

Gemm::Gemm(cudaStream_t stream) {
  try {
    KILN_CUBLAS_TRY(cublasLtCreate(&lt_), "creating the cuBLASLt handle");
    KILN_CUBLAS_TRY(cublasCreate(&blas_), "creating the cuBLAS handle");
    KILN_CUDA_TRY(cudaMalloc(&workspace_, kWorkspaceBytes), "the 32 MiB cuBLAS workspace");
    KILN_CUBLAS_TRY(cublasSetStream(blas_, stream), "cuBLAS set-up");
    // One workspace serves both handles: every product is ordered on the
    // device's stream (or inside one captured graph launched on it).
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

  GemmArgs g;
  uint32_t align = 0;
  std::tie(g.t, g.math, g.trans_a, g.trans_b, g.m, g.n, g.k, align) = key;
  auto p = std::make_shared<Plan>();
  p->legacy = g.t == DType::F64 || !p->build(lt_, g, align, nullptr);
  if (plans_.size() >= kMaxPlans) plans_.clear();  // plans in flight stay alive through their shared_ptr
  plans_.emplace(key, p);
  return p;
}

void Gemm::run(const Launch &L, const GemmArgs &g) {
  if (g.m <= 0 || g.n <= 0) return;
  if (g.k <= 0) {  // an empty sum: C = beta C (cuBLAS rejects zero-sized layouts)
    if (g.beta == 0.0) fill(L, FillArgs{g.t, g.m * g.n, g.c, 0.0});
    else scalar(L, ScalarArgs{BinaryOp::Mul, g.t, g.m * g.n, g.c, g.beta, g.c});
    return;
  }
  check(g.t == DType::F32 || g.t == DType::F64 || g.t == DType::F16 || g.t == DType::BF16, KILN_ERROR_NOT_SUPPORTED,
        std::string("gemm on CUDA needs a float dtype, not ") + dtype_name(g.t));
  auto what = [&] { return gemm_text(g.t, g.m, g.n, g.k); };
  const MathMode math = g.t == DType::F32 ? g.math : MathMode::Exact;  // one plan where the mode changes nothing
  const std::shared_ptr<const Plan> p =
      plan({g.t, math, g.trans_a, g.trans_b, g.m, g.n, g.k, common_alignment(g.a, g.b, g.c)});
  const float alpha_f = float(g.alpha), beta_f = float(g.beta);
  const bool f64 = g.t == DType::F64;
  const void *alpha_p = f64 ? static_cast<const void *>(&g.alpha) : &alpha_f;
  const void *beta_p = f64 ? static_cast<const void *>(&g.beta) : &beta_f;
  if (!p->legacy) {
    KILN_CUBLAS_TRY(cublasLtMatmul(lt_, p->desc, alpha_p, g.b, p->a, g.a, p->b, beta_p, g.c, p->c, g.c, p->c, &p->algo,
                                   workspace_, kWorkspaceBytes, L.stream),
                    what());
    return;
  }
  // The legacy handle is bound to one stream; L.stream differs from the
  // device's while a graph is being captured, so set it for this call.
  // cublasSetStream also drops the handle's workspace (back to cuBLAS's own
  // pool), so the shared one is set again after it, every time.
  std::lock_guard<std::mutex> lock(blas_mutex_);
  KILN_CUBLAS_TRY(cublasSetStream(blas_, L.stream), what());
  KILN_CUBLAS_TRY(cublasSetWorkspace(blas_, workspace_, kWorkspaceBytes), what());
  const cudaDataType_t type = cuda_type(g.t);
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : compute_type(g.t, math);
  const LtProduct lp = lt_product(g);
  KILN_CUBLAS_TRY(cublasGemmEx_64(blas_, lp.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  lp.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N, lp.m, lp.n, lp.k, alpha_p, g.b, type,
                                  lp.first.ld, g.a, type, lp.second.ld, beta_p, g.c, type, lp.out.ld, compute,
                                  CUBLAS_GEMM_DEFAULT),
                  what());
}

std::shared_ptr<const Gemm::Fused> Gemm::fuse(const GemmArgs &args, const Epilogue &epilogue) {
  const bool plain_product = args.alpha == 1.0 && args.beta == 0.0;
  if (args.t == DType::F64 || args.m <= 0 || args.n <= 0 || args.k <= 0 || !plain_product) return nullptr;
  auto fused = std::make_shared<Fused>();
  fused->args = args;
  if (args.t != DType::F32) fused->args.math = MathMode::Exact;
  if (!fused->plan.build(lt_, fused->args, common_alignment(args.a, args.b, args.c), &epilogue)) return nullptr;
  return fused;
}

void Gemm::run(const Launch &L, const Fused &f) {
  const float one = 1, zero = 0;
  const GemmArgs &g = f.args;
  KILN_CUBLAS_TRY(cublasLtMatmul(lt_, f.plan.desc, &one, g.b, f.plan.a, g.a, f.plan.b, &zero, g.c, f.plan.c, g.c,
                                 f.plan.c, &f.plan.algo, workspace_, kWorkspaceBytes, L.stream),
                  gemm_text(g.t, g.m, g.n, g.k) + " with a cuBLASLt epilogue");
}

}  // namespace kiln::cuda
