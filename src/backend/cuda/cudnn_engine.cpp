// CudnnEngine: cuDNN loaded at run time, Linear layers as cuDNN backend
// graphs, per-shape timing against the caller's path, and cuDNN's softmax.
//
// Layout. kiln's matrices are row-major; cuDNN's matmul takes 3-D tensors
// A [batch, M, K], B [batch, K, N], C [batch, M, N] with explicit strides, so
// every matrix is a batch of one whose strides say how it sits in memory:
//   x  [rows, in]  -> [1, rows, in]  strides [rows*in, in, 1]
//   W^T (W stored [out, in]) -> [1, in, out] strides [in*out, 1, in]
//       (element (k, n) of W^T is W[n*in + k]: W read transposed, no copy)
//   W  as itself   -> [1, out, in]  strides [out*in, in, 1]
//   dy^T (dy stored [rows, out]) -> [1, out, rows] strides [rows*out, 1, out]
//   b  [out]       -> [1, 1, out]   strides [out, out, 1] (broadcast over rows)
#include "backend/cuda/cudnn_engine.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cuda/check.hpp"
#include "backend/cuda/cudnn_library.hpp"

namespace kiln::cuda {

namespace {

// ---- plan building: failures decline the plan, they are not errors -----------

struct Declined {
  std::string why;
};

void check_build(const CudnnApi &api, cudnnStatus_t s, const char *what) {
  if (s != CUDNN_STATUS_SUCCESS) throw Declined{std::string(what) + ": " + status_text(api, s)};
}

// Owns one backend descriptor.
class Desc {
 public:
  Desc(const CudnnApi &api, cudnnBackendDescriptorType_t type, const char *what) : api_(&api) {
    check_build(api, api.CreateDescriptor(type, &d_), what);
  }
  ~Desc() {
    if (d_) api_->DestroyDescriptor(d_);
  }
  Desc(Desc &&o) noexcept : api_(o.api_), d_(std::exchange(o.d_, nullptr)) {}
  Desc &operator=(Desc &&) = delete;
  Desc(const Desc &) = delete;
  Desc &operator=(const Desc &) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void *values,
           const char *what) {
    check_build(*api_, api_->SetAttribute(d_, name, type, count, values), what);
  }
  void set(cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t d, const char *what) {
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d, what);
  }
  void finalize(const char *what) { check_build(*api_, api_->Finalize(d_), what); }

 private:
  const CudnnApi *api_;
  cudnnBackendDescriptor_t d_ = nullptr;
};

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    case DType::F64: return CUDNN_DATA_DOUBLE;
    default: break;
  }
  throw Declined{std::string("cuDNN has no path for ") + dtype_name(t)};
}

// Largest power of two (at most 16) dividing every address: the alignment
// cuDNN may assume for all tensors of a plan.
uint32_t common_alignment(std::initializer_list<const void *> ptrs) {
  uintptr_t bits = 16;
  for (const void *p : ptrs)
    if (p) bits |= reinterpret_cast<uintptr_t>(p);
  return uint32_t(bits & (~bits + 1));
}

// Unique ids of the tensors in kiln's graphs. The non-virtual ones are the
// variant pack's keys; the virtual ones (cuDNN keeps them on chip) need ids
// too, distinct from those.
enum : int64_t {
  kUidX = 1, kUidW, kUidBias, kUidPre, kUidY, kUidDy, kUidDx, kUidDw, kUidActIn,
  kUidMatmulOut = 101, kUidBiasOut, kUidActGrad,
};

// The kinds of graph (part of a plan's key).
enum GraphKind : int { kForward = 0, kDgrad = 1, kDgradFused = 2, kWgrad = 3 };

}  // namespace

// One finalized execution plan, its workspace, and the descriptors it was
// built from (kept alive with it), for one graph of one shape.
struct CudnnEngine::Plan {
  std::deque<Desc> parts;
  std::vector<int64_t> uids;  // the non-virtual tensors, in the variant pack's order
  std::unique_ptr<Desc> plan;
  int64_t engine_index = -1;  // cuDNN's global engine index, for describe()
  int64_t workspace_bytes = 0;
  void *workspace = nullptr;
  cudaStream_t stream = nullptr;
  cudaMemPool_t pool = nullptr;

  Plan() = default;
  Plan(const Plan &) = delete;
  Plan &operator=(const Plan &) = delete;
  ~Plan() {
    // Plans die with the engine, after the stream has drained; an error here
    // means the device is already lost and was reported elsewhere.
    if (workspace && (pool ? cudaFreeAsync(workspace, stream) : cudaFree(workspace)) != cudaSuccess)
      cudaGetLastError();
  }
};

namespace {

// Builds one operation graph and finalizes it into a plan.
class Graph {
 public:
  Graph(const CudnnApi &api, cudnnHandle_t handle) : api_(api), handle_(handle) {}

  // A 3-D tensor (see the layout note at the top). Virtual tensors are
  // intermediates, computed in f32 and never stored.
  cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t type, std::array<int64_t, 3> dims,
                                  std::array<int64_t, 3> strides, int64_t alignment, bool is_virtual) {
    Desc &d = add(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "creating a tensor descriptor");
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "a tensor's data type");
    d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 3, dims.data(), "a tensor's dimensions");
    d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 3, strides.data(), "a tensor's strides");
    d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "a tensor's unique id");
    d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "a tensor's alignment");
    d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "a tensor's virtual flag");
    d.finalize("finalizing a tensor descriptor");
    if (!is_virtual) uids_.push_back(uid);
    return d.get();
  }

  // c = a b, accumulated in f32.
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    Desc &m = add(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "creating a matmul descriptor");
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    m.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "the matmul's compute type");
    m.finalize("finalizing a matmul descriptor");
    Desc &op = add(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "creating a matmul operation");
    op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "the matmul's A");
    op.set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, "the matmul's B");
    op.set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "the matmul's C");
    op.set(CUDNN_ATTR_OPERATION_MATMUL_DESC, m.get(), "the matmul's descriptor");
    op.finalize("finalizing a matmul operation");
    ops_.push_back(op.get());
  }

  // y = mode(x) or y = mode(x, b) (b broadcast where its dimension is 1).
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t y) {
    Desc &op = add(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "creating a pointwise operation");
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, mode_desc(mode), "the pointwise mode");
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "the pointwise input");
    if (b) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, "the pointwise second input");
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "the pointwise output");
    op.finalize("finalizing a pointwise operation");
    ops_.push_back(op.get());
  }

  // dx = dy * mode'(x) for the *_BWD modes.
  void pointwise_backward(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t dy, cudnnBackendDescriptor_t x,
                          cudnnBackendDescriptor_t dx) {
    Desc &op = add(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "creating a pointwise backward operation");
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, mode_desc(mode), "the pointwise mode");
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, dy, "the pointwise dy");
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "the pointwise x");
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, dx, "the pointwise dx");
    op.finalize("finalizing a pointwise backward operation");
    ops_.push_back(op.get());
  }

  // The operation graph, the engine configs of heuristics mode A (then of
  // the fallback list, whose engines are slow but cover more graphs: the
  // timing decides), and the first config that finalizes into a plan whose
  // numerics kiln accepts. Tensor cores are fine: only ops that allow them
  // (half types, f32 with TF32) are offered to cuDNN.
  std::shared_ptr<CudnnEngine::Plan> finish(cudaStream_t stream, cudaMemPool_t pool) {
    Desc &graph = add(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "creating the operation graph");
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, "the graph's handle");
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops_.size()), ops_.data(),
              "the graph's operations");
    graph.finalize("finalizing the operation graph");

    std::string last = "no engine config";
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      Desc &heur = add(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "creating the heuristics");
      heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph.get(), "the heuristics' graph");
      heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "the heuristics' mode");
      // A mode that has no list for this graph leaves the other mode to try.
      cudnnStatus_t s = api_.Finalize(heur.get());
      int64_t count = 0;
      if (s == CUDNN_STATUS_SUCCESS)
        s = api_.GetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                              nullptr);
      if (s != CUDNN_STATUS_SUCCESS) {
        last = std::string(mode == CUDNN_HEUR_MODE_A ? "heuristics mode A" : "fallback heuristics") + ": " +
               status_text(api_, s);
        continue;
      }
      // cuDNN fills descriptors the caller made.
      std::vector<Desc> cfgs;
      std::vector<cudnnBackendDescriptor_t> raw;
      for (int64_t i = 0; i < count; ++i) {
        cfgs.emplace_back(api_, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "creating an engine config");
        raw.push_back(cfgs.back().get());
      }
      int64_t got = 0;
      if (count > 0 && (s = api_.GetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                              count, &got, raw.data())) != CUDNN_STATUS_SUCCESS) {
        last = "reading the engine configs: " + status_text(api_, s);
        continue;
      }
      for (int64_t i = 0; i < std::min(got, count); ++i) {
        int64_t engine_index = -1;
        if (!acceptable(raw[size_t(i)], &engine_index, &last)) continue;
        auto plan = std::make_unique<Desc>(api_, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "creating a plan");
        plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, "the plan's handle");
        plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, raw[size_t(i)], "the plan's engine config");
        s = api_.Finalize(plan->get());
        if (s != CUDNN_STATUS_SUCCESS) {
          last = "engine " + std::to_string(engine_index) + " does not finalize: " + status_text(api_, s);
          continue;
        }
        auto result = std::make_shared<CudnnEngine::Plan>();
        int64_t n = 0;
        check_build(api_,
                    api_.GetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                      &result->workspace_bytes),
                    "reading the plan's workspace size");
        result->stream = stream, result->pool = pool;
        if (result->workspace_bytes > 0) {
          const size_t bytes = size_t(result->workspace_bytes);
          const cudaError_t e = pool ? cudaMallocFromPoolAsync(&result->workspace, bytes, pool, stream)
                                     : cudaMalloc(&result->workspace, bytes);
          if (e != cudaSuccess) {
            cudaGetLastError();
            result->workspace = nullptr;
            throw Declined{"its workspace of " + std::to_string(bytes) + " bytes cannot be allocated: " +
                           cudaGetErrorString(e)};
          }
          // The plan may next run on another stream (a graph's capture
          // stream), which does not wait for this one's allocation.
          KILN_CUDA_TRY(cudaStreamSynchronize(stream), "allocating a cuDNN workspace");
        }
        result->engine_index = engine_index;
        result->plan = std::move(plan);
        result->uids = uids_;
        // Everything the plan was made from lives as long as the plan: the
        // backend API does not promise that a finalized plan copied it.
        for (Desc &c : cfgs) parts_.push_back(std::move(c));
        result->parts = std::move(parts_);
        return result;
      }
    }
    throw Declined{"no engine config of the graph is usable (last: " + last + ")"};
  }

 private:
  Desc &add(cudnnBackendDescriptorType_t type, const char *what) {
    parts_.emplace_back(api_, type, what);
    return parts_.back();
  }

  cudnnBackendDescriptor_t mode_desc(cudnnPointwiseMode_t mode) {
    Desc &pw = add(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "creating a pointwise descriptor");
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "the pointwise mode");
    pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f32, "the pointwise precision");
    pw.finalize("finalizing a pointwise descriptor");
    return pw.get();
  }

  // Whether kiln may run this engine config: inputs are never converted
  // down, accumulation is f32, and results are deterministic (as cuBLASLt's,
  // so runs repeat bit for bit).
  bool acceptable(cudnnBackendDescriptor_t cfg, int64_t *engine_index, std::string *why) {
    Desc engine(api_, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "creating an engine descriptor");
    cudnnBackendDescriptor_t raw = engine.get();
    int64_t n = 0;
    std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
    if (api_.GetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw) !=
            CUDNN_STATUS_SUCCESS ||
        api_.GetAttribute(raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, engine_index) !=
            CUDNN_STATUS_SUCCESS ||
        api_.GetAttribute(raw, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, int64_t(notes.size()), &n,
                          notes.data()) != CUDNN_STATUS_SUCCESS) {
      *why = "an engine config does not say its numerics";
      return false;
    }
    for (int64_t i = 0; i < std::min<int64_t>(n, int64_t(notes.size())); ++i) {
      const cudnnBackendNumericalNote_t note = notes[size_t(i)];
      if (note == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS || note == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION ||
          note == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) {
        *why = "engine " + std::to_string(*engine_index) + " has numerical note " + std::to_string(int(note));
        return false;
      }
    }
    return true;
  }

  const CudnnApi &api_;
  cudnnHandle_t handle_;
  std::deque<Desc> parts_;  // a deque: add() hands out references that must survive later adds
  std::vector<cudnnBackendDescriptor_t> ops_;
  std::vector<int64_t> uids_;
};

// The pointwise modes of kiln's activations (GELU is the erf form in both).
cudnnPointwiseMode_t forward_mode(UnaryOp act) {
  switch (act) {
    case UnaryOp::Relu: return CUDNN_POINTWISE_RELU_FWD;
    case UnaryOp::Gelu: return CUDNN_POINTWISE_GELU_FWD;
    default: break;
  }
  throw Declined{"activation not offered to cuDNN"};
}

// ReLU's gradient from the output y (y > 0 exactly where pre > 0, and
// RELU_BWD's mask is x > 0), GELU's from the pre-activation: the inputs
// kiln's own act_backward reads.
cudnnPointwiseMode_t backward_mode(UnaryOp act) {
  return act == UnaryOp::Relu ? CUDNN_POINTWISE_RELU_BWD : CUDNN_POINTWISE_GELU_BWD;
}

// Whether cuDNN may take a Linear op of this type, math and activation; if
// not, why. Strict f32 stays on cuBLASLt (CUBLAS_COMPUTE_32F): with cuDNN
// on, f32 steps on an H200 (2026-11-27) were off by TF32's 5e-4 relative
// against PyTorch's f32 (test_trainer's clipped step) and every f32 forward
// engine was declined anyway, for its tensor-core note.
bool offered(DType t, MathMode math, UnaryOp act, std::string *why_not) {
  if (act != UnaryOp::Identity && act != UnaryOp::Relu && act != UnaryOp::Gelu) {
    *why_not = "not offered to cuDNN: activation";
  } else if (t == DType::F64) {
    *why_not = "not offered to cuDNN: f64";
  } else if (t == DType::F32 && math != MathMode::Tf32) {
    *why_not = "not offered to cuDNN: strict f32";
  } else {
    return true;
  }
  return false;
}

std::string shape_text(int64_t rows, int64_t in, int64_t out, DType t, UnaryOp act) {
  const char *name = act == UnaryOp::Identity ? "identity" : act == UnaryOp::Relu ? "relu" : act == UnaryOp::Gelu ? "gelu" : "other";
  return std::to_string(rows) + "x" + std::to_string(in) + "->" + std::to_string(out) + " " + name + " " +
         dtype_name(t);
}

}  // namespace

// ---- bound calls --------------------------------------------------------------------

// One plan with its variant pack (the op's pointers, fixed at bind time).
class BoundPlan {
 public:
  BoundPlan(const CudnnApi &api, std::shared_ptr<const CudnnEngine::Plan> plan,
            const std::vector<std::pair<int64_t, const void *>> &pointers)
      : plan_(std::move(plan)), pack_(api, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "creating a variant pack") {
    std::vector<void *> ptrs;
    for (int64_t uid : plan_->uids) {
      auto it = std::find_if(pointers.begin(), pointers.end(), [&](const auto &p) { return p.first == uid; });
      if (it == pointers.end() || !it->second)
        throw Declined{"internal: no pointer for tensor " + std::to_string(uid)};
      ptrs.push_back(const_cast<void *>(it->second));
    }
    void *ws = plan_->workspace;
    pack_.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(plan_->uids.size()), plan_->uids.data(),
              "the variant pack's ids");
    pack_.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()), ptrs.data(),
              "the variant pack's pointers");
    pack_.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, "the variant pack's workspace");
    pack_.finalize("finalizing the variant pack");
  }

  // Queues the plan; the caller holds the engine's mutex. `what` and `part`
  // name it in the error (no string is built unless it failed).
  void execute(const CudnnApi &api, cudnnHandle_t handle, const std::string &what, const char *part) const {
    const cudnnStatus_t s = api.Execute(handle, plan_->plan->get(), pack_.get());
    if (s != CUDNN_STATUS_SUCCESS)
      fail(status_of(s), "cudnnBackendExecute failed: " + status_text(api, s) + " (" + what + part +
                                   ", engine " + std::to_string(plan_->engine_index) + ")");
  }

 private:
  std::shared_ptr<const CudnnEngine::Plan> plan_;
  Desc pack_;
};

class LinearCall final : public CudnnCall {
 public:
  LinearCall(CudnnEngine &e, BoundPlan plan, std::string what) : e_(e), plan_(std::move(plan)), what_(std::move(what)) {}
  void execute(const Launch &L) override {
    std::lock_guard<std::recursive_mutex> lock(e_.mutex_);
    e_.use_stream(L.stream);
    plan_.execute(e_.api_, e_.handle_, what_, "");
  }

 private:
  CudnnEngine &e_;
  BoundPlan plan_;
  std::string what_;
};

// The backward of a Linear layer. The op must leave g = dy * act'(.) in dy,
// so g is materialised once anyway, by kiln's elementwise act_backward in
// place; dW = g^T x and (plain variant) dX = g W are cuDNN products reading g,
// and db = column sums of g is kiln's bias_grad (a reduction over rows that
// cuDNN would run as a separate graph, no better). The fused variant instead
// computes dX from the raw dy with dy * act'(.) as the product's prologue
// (before act_backward overwrites dy): it re-reads dy and the activation
// input once more than the plain one, so it only wins where cuDNN's fused
// engine is faster than its plain one; the timing decides.
class LinearBackwardCall final : public CudnnCall {
 public:
  LinearBackwardCall(CudnnEngine &e, const LinearBackwardOp &op, std::unique_ptr<BoundPlan> dgrad, bool fused,
                     BoundPlan wgrad, std::string what)
      : e_(e), op_(op), dgrad_(std::move(dgrad)), fused_(fused), wgrad_(std::move(wgrad)), what_(std::move(what)) {}
  void execute(const Launch &L) override {
    std::lock_guard<std::recursive_mutex> lock(e_.mutex_);
    e_.use_stream(L.stream);
    if (dgrad_ && fused_) dgrad_->execute(e_.api_, e_.handle_, what_, " dX fused");
    if (op_.act != UnaryOp::Identity) act_backward(L, backward_act(op_));
    wgrad_.execute(e_.api_, e_.handle_, what_, " dW");
    if (op_.db) bias_grad(L, bias_grad_of(op_));
    if (dgrad_ && !fused_) dgrad_->execute(e_.api_, e_.handle_, what_, " dX");
  }

 private:
  CudnnEngine &e_;
  LinearBackwardOp op_;
  std::unique_ptr<BoundPlan> dgrad_;
  bool fused_;
  BoundPlan wgrad_;
  std::string what_;
};

// ---- the engine ---------------------------------------------------------------------

std::unique_ptr<CudnnEngine> CudnnEngine::create(const Launch &launch, cudaMemPool_t pool, std::string *reason) {
  const CudnnLibrary &l = cudnn_library();
  if (!l.reason.empty()) {
    *reason = l.reason;
    return nullptr;
  }
  std::unique_ptr<CudnnEngine> e(new CudnnEngine(l.api, launch, pool));
  cudnnStatus_t s = l.api.Create(&e->handle_);
  if (s != CUDNN_STATUS_SUCCESS) {
    e->handle_ = nullptr;
    // Out of memory is the device's state, not cuDNN's: say so (the next
    // use tries again) rather than run without cuDNN for good.
    if (status_of(s) == KILN_ERROR_OUT_OF_MEMORY) fail(status_of(s), "cudnnCreate failed: " + status_text(l.api, s));
    *reason = "cudnnCreate failed: " + status_text(l.api, s);
    return nullptr;
  }
  s = l.api.SetStream(e->handle_, launch.stream);
  if (s != CUDNN_STATUS_SUCCESS) {
    if (status_of(s) == KILN_ERROR_OUT_OF_MEMORY) fail(status_of(s), "cudnnSetStream failed: " + status_text(l.api, s));
    *reason = "cudnnSetStream failed: " + status_text(l.api, s);
    return nullptr;
  }
  e->handle_stream_ = launch.stream;
  return e;
}

void CudnnEngine::use_stream(cudaStream_t stream) {
  if (stream == handle_stream_) return;
  const cudnnStatus_t s = api_.SetStream(handle_, stream);
  if (s != CUDNN_STATUS_SUCCESS) fail(status_of(s), "cudnnSetStream failed: " + status_text(api_, s));
  handle_stream_ = stream;
}

CudnnEngine::CudnnEngine(const CudnnApi &api, const Launch &launch, cudaMemPool_t pool)
    : api_(api), launch_(launch), pool_(pool) {
  const char *always = std::getenv("KILN_CUDNN_ALWAYS");
  always_ = always && std::string(always) == "1";
}

CudnnEngine::~CudnnEngine() {
  plans_.clear();  // before the handle: plans were made with it
  if (handle_) api_.Destroy(handle_);
}

std::shared_ptr<const CudnnEngine::Plan> CudnnEngine::plan(
    const PlanKey &key, const std::function<std::shared_ptr<const Plan>()> &build, std::string *why_not) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    std::pair<std::shared_ptr<const Plan>, std::string> entry;
    try {
      entry.first = build();
    } catch (const Declined &d) {
      entry.second = d.why;
    }
    it = plans_.emplace(key, std::move(entry)).first;
  }
  if (!it->second.first) *why_not = it->second.second;
  return it->second.first;
}

std::unique_ptr<CudnnCall> CudnnEngine::bind(const LinearOp &op, std::string *why_not) {
  const std::string what = "linear " + shape_text(op.rows, op.in, op.out, op.t, op.act);
  if (!offered(op.t, op.math, op.act, why_not)) return nullptr;
  if (op.pre && op.act == UnaryOp::Identity) {
    *why_not = "an identity layer that also keeps its pre-activation";  // two copies of one value: not worth a graph
    return nullptr;
  }
  const uint32_t align = common_alignment({op.x, op.w, op.b, op.y, op.pre});
  const PlanKey key{kForward, op.t, op.math, op.rows, op.in, op.out, op.act, op.b != nullptr, op.pre != nullptr, align};
  auto build = [&]() -> std::shared_ptr<const Plan> {
    Graph g(api_, handle_);
    const cudnnDataType_t t = cudnn_type(op.t), f32 = CUDNN_DATA_FLOAT;
    const int64_t rows = op.rows, in = op.in, out = op.out, a = align;
    const std::array<int64_t, 3> y_dims{1, rows, out}, y_strides{rows * out, out, 1};
    // The pre-activation is stored where asked (pre, or y when there is no
    // activation), otherwise it stays on chip.
    const bool act = op.act != UnaryOp::Identity;
    auto stage_out = [&](int64_t virtual_uid, bool last) {
      if (last) return g.tensor(kUidY, t, y_dims, y_strides, a, false);
      if (op.pre) return g.tensor(kUidPre, t, y_dims, y_strides, a, false);
      return g.tensor(virtual_uid, f32, y_dims, y_strides, a, true);
    };
    cudnnBackendDescriptor_t x = g.tensor(kUidX, t, {1, rows, in}, {rows * in, in, 1}, a, false);
    cudnnBackendDescriptor_t wt = g.tensor(kUidW, t, {1, in, out}, {in * out, 1, in}, a, false);  // W^T
    // With a bias the product is always an intermediate; without one it is
    // the pre-activation itself.
    cudnnBackendDescriptor_t cur =
        op.b ? g.tensor(kUidMatmulOut, f32, y_dims, y_strides, a, true) : stage_out(kUidMatmulOut, !act);
    g.matmul(x, wt, cur);
    if (op.b) {
      cudnnBackendDescriptor_t bias = g.tensor(kUidBias, t, {1, 1, out}, {out, out, 1}, a, false);
      cudnnBackendDescriptor_t sum = stage_out(kUidBiasOut, !act);
      g.pointwise(CUDNN_POINTWISE_ADD, cur, bias, sum);
      cur = sum;
    }
    if (act) g.pointwise(forward_mode(op.act), cur, nullptr, g.tensor(kUidY, t, y_dims, y_strides, a, false));
    return g.finish(launch_.stream, pool_);
  };
  std::shared_ptr<const Plan> p = plan(key, build, why_not);
  if (!p) return nullptr;
  try {
    return std::make_unique<LinearCall>(
        *this, BoundPlan(api_, p, {{kUidX, op.x}, {kUidW, op.w}, {kUidBias, op.b}, {kUidPre, op.pre}, {kUidY, op.y}}),
        what);
  } catch (const Declined &d) {
    *why_not = d.why;
    return nullptr;
  }
}

std::unique_ptr<CudnnCall> CudnnEngine::bind(const LinearBackwardOp &op, bool fuse_dgrad, std::string *why_not) {
  const std::string what = "linear backward " + shape_text(op.rows, op.in, op.out, op.t, op.act);
  if (!offered(op.t, op.math, op.act, why_not)) return nullptr;
  if (fuse_dgrad && (!op.dx || op.act == UnaryOp::Identity)) {
    *why_not = "nothing to fuse";
    return nullptr;
  }
  const void *act_in = op.act == UnaryOp::Gelu ? op.pre : op.y;
  const uint32_t align = common_alignment({op.dy, op.x, op.w, act_in, op.dw, op.dx});
  const int64_t rows = op.rows, in = op.in, out = op.out, a = align;
  try {
    const cudnnDataType_t t = cudnn_type(op.t);
    // dW [out, in] = g^T x: A = dy^T read transposed (see the layout note).
    const PlanKey wkey{kWgrad, op.t, op.math, rows, in, out, UnaryOp::Identity, false, false, align};
    std::shared_ptr<const Plan> wplan = plan(
        wkey,
        [&]() -> std::shared_ptr<const Plan> {
          Graph g(api_, handle_);
          cudnnBackendDescriptor_t dyt = g.tensor(kUidDy, t, {1, out, rows}, {rows * out, 1, out}, a, false);
          cudnnBackendDescriptor_t x = g.tensor(kUidX, t, {1, rows, in}, {rows * in, in, 1}, a, false);
          g.matmul(dyt, x, g.tensor(kUidDw, t, {1, out, in}, {out * in, in, 1}, a, false));
          return g.finish(launch_.stream, pool_);
        },
        why_not);
    if (!wplan) return nullptr;
    // dX [rows, in] = g W, g from dy in place (plain) or computed on chip
    // from the raw dy and the activation's input (fused).
    std::unique_ptr<BoundPlan> dgrad;
    if (op.dx) {
      const PlanKey dkey{fuse_dgrad ? kDgradFused : kDgrad, op.t, op.math, rows, in, out,
                         fuse_dgrad ? op.act : UnaryOp::Identity, false, false, align};
      std::shared_ptr<const Plan> dplan = plan(
          dkey,
          [&]() -> std::shared_ptr<const Plan> {
            Graph g(api_, handle_);
            const std::array<int64_t, 3> dims{1, rows, out}, strides{rows * out, out, 1};
            cudnnBackendDescriptor_t grad = g.tensor(kUidDy, t, dims, strides, a, false);
            if (fuse_dgrad) {
              cudnnBackendDescriptor_t x = g.tensor(kUidActIn, t, dims, strides, a, false);
              cudnnBackendDescriptor_t gv = g.tensor(kUidActGrad, CUDNN_DATA_FLOAT, dims, strides, a, true);
              g.pointwise_backward(backward_mode(op.act), grad, x, gv);
              grad = gv;
            }
            cudnnBackendDescriptor_t w = g.tensor(kUidW, t, {1, out, in}, {out * in, in, 1}, a, false);
            g.matmul(grad, w, g.tensor(kUidDx, t, {1, rows, in}, {rows * in, in, 1}, a, false));
            return g.finish(launch_.stream, pool_);
          },
          why_not);
      if (!dplan) return nullptr;
      dgrad = std::make_unique<BoundPlan>(api_, dplan,
                                          std::vector<std::pair<int64_t, const void *>>{
                                              {kUidDy, op.dy}, {kUidActIn, act_in}, {kUidW, op.w}, {kUidDx, op.dx}});
    }
    BoundPlan wgrad(api_, wplan, {{kUidDy, op.dy}, {kUidX, op.x}, {kUidDw, op.dw}});
    return std::make_unique<LinearBackwardCall>(*this, op, std::move(dgrad), fuse_dgrad, std::move(wgrad), what);
  } catch (const Declined &d) {
    *why_not = d.why;
    return nullptr;
  }
}

// ---- timing and choosing ------------------------------------------------------------

namespace {

bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  KILN_CUDA_TRY(cudaStreamIsCapturing(s, &status), "checking whether the stream is captured");
  return status != cudaStreamCaptureStatusNone;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Owns the CUDA events of one timing.
class Events {
 public:
  explicit Events(size_t n) {
    try {
      for (size_t i = 0; i < n; ++i) {
        cudaEvent_t e = nullptr;
        KILN_CUDA_TRY(cudaEventCreate(&e), "creating a timing event");
        events_.push_back(e);
      }
    } catch (...) {
      release();
      throw;
    }
  }
  ~Events() { release(); }
  Events(const Events &) = delete;
  Events &operator=(const Events &) = delete;
  cudaEvent_t operator[](size_t i) const { return events_[i]; }
  float ms(size_t from, size_t to) const {
    float t = 0;
    KILN_CUDA_TRY(cudaEventElapsedTime(&t, events_[from], events_[to]), "reading a timing event");
    return t;
  }

 private:
  void release() noexcept {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    events_.clear();
  }
  std::vector<cudaEvent_t> events_;
};

std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f ms", ms);
  return buf;
}

// cuDNN must beat the other path by this factor: ties go to kiln's own path
// (cuBLASLt or kernels), the one the rest of kiln is tested with.
constexpr double kMargin = 0.98;

}  // namespace

CudnnEngine::Timing CudnnEngine::time_plan(const std::function<void()> &plan, const std::function<void()> &alternative,
                                           int reps) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (capturing(launch_.stream)) fail(KILN_ERROR_BACKEND, "cannot time cuDNN plans while the stream is captured");
  reps = std::max(reps, 1);
  plan();  // warm-up: lazy module loading, the other path's own plan caches
  alternative();
  Events ev(size_t(3 * reps));
  for (int r = 0; r < reps; ++r) {
    const bool plan_first = r % 2 == 0;  // alternate, so neither always follows the other's cache footprint
    KILN_CUDA_TRY(cudaEventRecord(ev[size_t(3 * r)], launch_.stream), "recording a timing event");
    (plan_first ? plan : alternative)();
    KILN_CUDA_TRY(cudaEventRecord(ev[size_t(3 * r + 1)], launch_.stream), "recording a timing event");
    (plan_first ? alternative : plan)();
    KILN_CUDA_TRY(cudaEventRecord(ev[size_t(3 * r + 2)], launch_.stream), "recording a timing event");
  }
  KILN_CUDA_TRY(cudaEventSynchronize(ev[size_t(3 * reps - 1)]), "waiting for the timing runs");
  std::vector<double> p, a;
  for (int r = 0; r < reps; ++r) {
    const double first = ev.ms(size_t(3 * r), size_t(3 * r + 1)), second = ev.ms(size_t(3 * r + 1), size_t(3 * r + 2));
    p.push_back(r % 2 == 0 ? first : second);
    a.push_back(r % 2 == 0 ? second : first);
  }
  return Timing{median(p), median(a)};
}

EngineChoice CudnnEngine::choose(const DecisionKey &key,
                                 const std::vector<Binder> &variants,
                                 const std::function<void()> &alternative, std::unique_ptr<CudnnCall> *call) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  call->reset();
  auto it = decisions_.find(key);
  if (it != decisions_.end()) {
    EngineChoice c = it->second;
    if (c.use_cudnn) {
      std::string why;
      *call = variants[size_t(c.variant)](&why);  // the plan is cached: this only binds the pointers
      if (!*call) c.use_cudnn = false, c.note = "cudnn plan cannot bind these pointers: " + why;
    }
    return c;
  }
  if (capturing(launch_.stream)) return EngineChoice{false, -1, -1, 0, "not timed: the stream is being captured"};
  // The fastest cuDNN variant first, then that one against the alternative.
  EngineChoice c;
  std::string declined;
  for (size_t v = 0; v < variants.size(); ++v) {
    std::string why;
    std::unique_ptr<CudnnCall> candidate = variants[v](&why);
    if (!candidate) {
      declined += (declined.empty() ? "" : "; ") + why;
      continue;
    }
    if (*call) {
      const Timing t = time_plan([&] { candidate->execute(launch_); }, [&] { (*call)->execute(launch_); });
      if (t.plan_ms >= t.alternative_ms) continue;
    }
    *call = std::move(candidate);
    c.variant = int(v);
  }
  if (!*call) {
    c.note = "cudnn declined: " + declined;
  } else {
    const Timing t = time_plan([&] { (*call)->execute(launch_); }, alternative);
    c.cudnn_ms = t.plan_ms, c.other_ms = t.alternative_ms;
    c.use_cudnn = always_ || t.plan_ms < kMargin * t.alternative_ms;
    c.note = "cudnn " + ms_text(t.plan_ms) + (c.variant ? " (fused)" : "") + ", other " + ms_text(t.alternative_ms);
    if (!c.use_cudnn) call->reset();
  }
  decisions_.emplace(key, c);
  return c;
}

EngineChoice CudnnEngine::choose_linear(const LinearOp &op, const std::function<void()> &alternative,
                                        std::unique_ptr<CudnnCall> *call) {
  const DecisionKey key{kForward, op.t, op.math, op.rows, op.in, op.out, op.act, op.b != nullptr, op.pre != nullptr,
                        false};
  return choose(key, {[&](std::string *why) { return bind(op, why); }}, alternative, call);
}

EngineChoice CudnnEngine::choose_linear(const LinearBackwardOp &op, const std::function<void()> &alternative,
                                        std::unique_ptr<CudnnCall> *call) {
  const DecisionKey key{kDgrad, op.t, op.math, op.rows, op.in, op.out, op.act, op.db != nullptr, op.pre != nullptr,
                        op.dx != nullptr};
  std::vector<Binder> variants{
      [&](std::string *why) { return bind(op, false, why); }};
  if (op.dx && op.act != UnaryOp::Identity) variants.push_back([&](std::string *why) { return bind(op, true, why); });
  return choose(key, variants, alternative, call);
}

// ---- softmax ------------------------------------------------------------------------

void CudnnEngine::run_softmax(cudaStream_t stream, const SoftmaxArgs &args) {
  const DType t = args.t;
  const int64_t outer = args.outer, n = args.n;
  use_stream(stream);
  struct TensorDesc {  // owns one legacy tensor descriptor
    const CudnnApi &api;
    cudnnTensorDescriptor_t d = nullptr;
    ~TensorDesc() {
      if (d) api.DestroyTensorDescriptor(d);
    }
  } desc{api_};
  auto check = [&](cudnnStatus_t s, const char *call) {
    if (s != CUDNN_STATUS_SUCCESS)
      fail(status_of(s), std::string(call) + " failed: " + status_text(api_, s) + " (softmax of " +
                                   std::to_string(outer) + " rows of " + std::to_string(n) + " " + dtype_name(t) + ")");
  };
  check(api_.CreateTensorDescriptor(&desc.d), "cudnnCreateTensorDescriptor");
  // NCHW [outer, n, 1, 1]: the INSTANCE mode normalises over C*H*W = n per row.
  check(api_.SetTensor4dDescriptor(desc.d, CUDNN_TENSOR_NCHW, cudnn_type(t), int(outer), int(n), 1, 1),
        "cudnnSetTensor4dDescriptor");
  // alpha and beta are float for every type but double, which softmax()
  // keeps away from cuDNN.
  const float one = 1, zero = 0;
  check(api_.SoftmaxForward(handle_, args.log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE,
                            &one, desc.d, args.in, &zero, desc.d, args.out),
        "cudnnSoftmaxForward");
}

void CudnnEngine::softmax(const Launch &L, const SoftmaxArgs &args, const std::function<void()> &own_kernel) {
  const DType t = args.t;
  const int64_t outer = args.outer, n = args.n;
  const int64_t bytes = outer * n * dtype_size(t);
  const char *i = static_cast<const char *>(args.in), *o = static_cast<const char *>(args.out);
  const bool overlap = i < o + bytes && o < i + bytes;
  // f64 stays with kiln's kernel: cuDNN's f64 log-softmax was 9e-14 off
  // (hundreds of ulp) on an H100 (test_ops_cudnn, 2026-11-26), and f64 is
  // asked for accuracy, not speed.
  if (!dtype_is_float(t) || t == DType::F64 || outer <= 0 || n <= 0 || outer * n > INT_MAX || overlap)
    return own_kernel();
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const SoftmaxKey key{t, outer, n, args.log};
  auto it = softmax_choice_.find(key);
  if (it == softmax_choice_.end()) {
    if (L.stream != launch_.stream || capturing(launch_.stream)) return own_kernel();
    bool faster = false;
    try {
      const Timing tm = time_plan([&] { run_softmax(launch_.stream, args); }, own_kernel);
      faster = always_ || tm.plan_ms < kMargin * tm.alternative_ms;
    } catch (const Error &) {
      // cuDNN refused the shape (e.g. NOT_SUPPORTED): the own kernel stays.
      // A real device fault resurfaces at the own kernel's next check.
    }
    it = softmax_choice_.emplace(key, faster).first;
  }
  if (it->second) run_softmax(L.stream, args);
  else own_kernel();
}

}  // namespace kiln::cuda
