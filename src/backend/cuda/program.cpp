// CudaExecutable: the CUDA fast path of step programs; see program.hpp.
#include "backend/cuda/program.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/check.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/planning/epilogue_plan.hpp"
#include "backend/cuda/planning/graph_runs.hpp"
#include "backend/cuda/planning/narrow_step.hpp"
#include "backend/cuda/planning/timing_guard.hpp"

namespace kiln::cuda {
namespace {

cublasLtEpilogue_t lt_epilogue(EpilogueKind kind) {
  switch (kind) {
    case EpilogueKind::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case EpilogueKind::Relu: return CUBLASLT_EPILOGUE_RELU;
    case EpilogueKind::ReluBias: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case EpilogueKind::ReluAux: return CUBLASLT_EPILOGUE_RELU_AUX;
    case EpilogueKind::ReluAuxBias: return CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    case EpilogueKind::DRelu: return CUBLASLT_EPILOGUE_DRELU;
    case EpilogueKind::DReluBgrad: return CUBLASLT_EPILOGUE_DRELU_BGRAD;
    case EpilogueKind::BgradB: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// A LinearBackwardOp on cuBLASLt. Any part left null runs as plain kernels.
struct BackwardPlan {
  // dy already holds the gradient w.r.t. the pre-activation, and db (if any)
  // is written: the op before this one fused them into its dx product.
  bool act_done = false;
  std::shared_ptr<const Gemm::Fused> dw;  // dW with db (BGRADB)
  std::shared_ptr<const Gemm::Fused> dx;  // dx with the next op's ReLU gradient and db (DRELU[_BGRAD])
};

const char *act_name(UnaryOp act) {
  switch (act) {
    case UnaryOp::Identity: return "identity";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::LeakyRelu: return "leaky_relu";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Elu: return "elu";
    case UnaryOp::Selu: return "selu";
    case UnaryOp::Softplus: return "softplus";
    default: return "other";
  }
}

// "linear 128x784->32 relu f32: cudnn (cudnn 0.0101 ms, other 0.0123 ms)",
// what describe() reports per timed op.
template <class Op>
std::string engine_note(const char *kind, const Op &op, const EngineChoice &c) {
  return std::string(kind) + " " + std::to_string(op.rows) + "x" + std::to_string(op.in) + "->" +
         std::to_string(op.out) + " " + act_name(op.act) + " " + dtype_name(op.t) + ": " +
         (c.use_cudnn ? "cudnn" : "other") + " (" + c.note + ")";
}

class CudaExecutable final : public Executable, private StepLauncher {
 public:
  CudaExecutable(CudaBackend &backend, int64_t index, const StepProgram &program);
  ~CudaExecutable() override;
  std::string describe() const override;

 protected:
  void run_steps(int64_t first, int64_t count) override;

 private:
  using Action = std::function<void(const StepParams *step)>;

  class DeviceTimingMemory;

  void plan_fused_ops();
  Action kernels_of(const StepOp &op);
  void *alloc_owned(int64_t bytes);
  void run_step(const StepParams *step);
  void run_backward(const LinearBackwardOp &op, const BackwardPlan &plan);

  // StepLauncher: what GraphRuns (planning/graph_runs.hpp) runs steps with.
  void set_cursor(int64_t first) override;
  void run_cursor_step() override;
  Graph capture(int64_t steps) override;
  void launch(Graph g) override;
  void destroy(Graph g) noexcept override;
  void run_table_steps(int64_t first, int64_t count) override;

  // The device-resident step state of the graphs (steps.cu).
  struct Cursor {
    StepParams current;
    int64_t next;
  };

  CudaBackend &backend_;
  int64_t index_;
  StepProgram program_;
  std::vector<Action> actions_;  // one per op
  std::vector<void *> owned_;    // device memory: ReLU bit-masks, the cursor
  int fused_linear_ = 0, fused_backward_ = 0, linear_ = 0, backward_ = 0;
  int cudnn_linear_ = 0, cudnn_backward_ = 0;
  std::string narrow_;  // describe()'s part for a narrow step: its shape
  std::string cudnn_;  // describe()'s cuDNN part: the per-op choices, or why cuDNN is unavailable
  Cursor *cursor_ = nullptr;
  cudaStream_t capture_stream_ = nullptr;
  std::unique_ptr<GraphRuns> graphs_;  // with kFastGraphs
};

CudaExecutable::CudaExecutable(CudaBackend &backend, int64_t index, const StepProgram &program)
    : Executable(program), backend_(backend), index_(index), program_(program) {
  try {
    plan_fused_ops();
    if (program_.fast_path & kFastGraphs) {
      cursor_ = static_cast<Cursor *>(alloc_owned(sizeof(Cursor)));
      KILN_CUDA_TRY(cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking),
                    "the capture stream of " + program_.label);
      graphs_ = std::make_unique<GraphRuns>(static_cast<StepLauncher &>(*this), [this](const std::string &why) {
        if (program_.log)
          program_.log(KILN_LOG_WARNING, "CUDA graphs of " + program_.label +
                                             " are off from now on, its steps run without them: " + why);
      });
    }
  } catch (...) {
    if (capture_stream_) cudaStreamDestroy(capture_stream_);
    for (void *p : owned_) backend_.free(index_, p);
    throw;
  }
}

// Graphs may still be running: CUDA frees them when they finish, and the
// buffers go back to the pool in the device stream's order. Nothing here can
// fail usefully; a device broken by a fault keeps its leftovers.
CudaExecutable::~CudaExecutable() {
  try {
    CudaBackend::Scope scope(backend_, index_);
    graphs_.reset();
    if (capture_stream_) cudaStreamDestroy(capture_stream_);
  } catch (...) {
  }
  for (void *p : owned_) backend_.free(index_, p);
}

void *CudaExecutable::alloc_owned(int64_t bytes) {
  void *p = backend_.alloc(index_, bytes);
  owned_.push_back(p);
  return p;
}

// Device memory for a TimingGuard, on the device's stream: the copies are
// queued in order with the timing, and freed after it.
class CudaExecutable::DeviceTimingMemory final : public TimingMemory {
 public:
  explicit DeviceTimingMemory(CudaExecutable &e) : e_(e) {}
  void *alloc(int64_t bytes) override { return e_.backend_.alloc(e_.index_, bytes); }
  void release(void *p) noexcept override { e_.backend_.free(e_.index_, p); }
  void copy(void *dst, const void *src, int64_t bytes) override {
    KILN_CUDA_TRY(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToDevice, stream()),
                  "saving a step buffer around the timing of cuDNN in " + e_.program_.label);
  }
  void fill(void *p, int64_t bytes) override {
    KILN_CUDA_TRY(cudaMemsetAsync(p, 0x3c, size_t(bytes), stream()),
                  "filling a step buffer before timing cuDNN in " + e_.program_.label);
  }

 private:
  cudaStream_t stream() const { return e_.backend_.launch(e_.index_).stream; }
  CudaExecutable &e_;
};

// The epilogues planning/epilogue_plan.hpp chooses, each product planned
// with cuBLASLt's heuristic as the planner asks (a refused one runs as
// kernels); then cuDNN for the Linear ops outside a ReLU pair, where it is
// enabled and timed faster.
void CudaExecutable::plan_fused_ops() {
  const std::vector<StepOp> &ops = program_.ops;
  const uint32_t fast = program_.fast_path;
  Gemm &gemm = backend_.matmuls(index_);

  // A narrow step's five ops are two kernels, and then its program has no
  // other Linear op to fuse: the rest (gather, clipping, the optimizer) runs
  // as kernels.
  if (const std::optional<NarrowStep> narrow = find_narrow_step(ops, fast)) {
    narrow_ = std::to_string(narrow->in) + "-" + std::to_string(narrow->hidden) + "-" +
              std::to_string(narrow->classes) + " rows " + std::to_string(narrow->rows);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (i == narrow->first)
        actions_.push_back([this, s = *narrow](const StepParams *) { narrow_step(backend_.launch(index_), s); });
      else if (i < narrow->first || i > narrow->last)
        actions_.push_back(kernels_of(ops[i]));
    }
    return;
  }

  // The bit-mask of every candidate pair; those of pairs the heuristic
  // refuses are freed again below. Zeroed once: cuBLASLt's epilogue kernels
  // read bytes of it that nothing had written, 16 bytes (one column's
  // mask_ld) apart, likely the padding (initcheck on the H200, 2026-11-27).
  const std::vector<ReluPair> candidates = find_relu_pairs(ops, fast);
  std::vector<void *> masks;
  for (const ReluPair &pr : candidates) {
    masks.push_back(alloc_owned(pr.mask_bytes));
    KILN_CUDA_TRY(cudaMemsetAsync(masks.back(), 0, size_t(pr.mask_bytes), backend_.launch(index_).stream),
                  "clearing a ReLU bit-mask of " + program_.label);
  }
  std::map<std::pair<size_t, ProductKind>, std::shared_ptr<const Gemm::Fused>> fused;
  const EpiloguePlan plan = plan_epilogues(ops, fast, candidates, [&](const FusedProduct &p) {
    GemmArgs args;
    Epilogue e{lt_epilogue(p.epilogue), nullptr, nullptr, 0};
    if (p.product == ProductKind::Forward) {
      const auto &f = std::get<LinearOp>(ops[p.op]);
      args = forward_product(f);
      e.bias = const_cast<void *>(f.b);
    } else {
      const auto &b = std::get<LinearBackwardOp>(ops[p.op]);
      args = p.product == ProductKind::WeightGrad ? weight_grad_product(b) : input_grad_product(b);
      // BGRADB writes this op's db; DRELU_BGRAD the db of the op below.
      e.bias = p.product == ProductKind::WeightGrad ? b.db
                                                    : std::get<LinearBackwardOp>(ops[candidates[size_t(p.pair)].below]).db;
    }
    if (p.pair >= 0) e.aux = masks[size_t(p.pair)], e.aux_ld = candidates[size_t(p.pair)].mask_ld;
    auto planned = gemm.fuse(args, e);
    if (planned) fused[{p.op, p.product}] = planned;
    return planned != nullptr;
  });
  for (size_t k = candidates.size(); k-- > 0;) {
    if (plan.used[k]) continue;
    backend_.free(index_, masks[k]);
    owned_.erase(std::find(owned_.begin(), owned_.end(), masks[k]));
  }
  auto fused_of = [&](size_t op, ProductKind kind) -> std::shared_ptr<const Gemm::Fused> {
    return plan.find(op, kind) ? fused.at({op, kind}) : nullptr;
  };

  // cuDNN may take any Linear op that is not half of a ReLU pair above (the
  // pair shares a bit-mask only cuBLASLt writes and reads). Its timing runs
  // the op on the program's own buffers, inside a TimingGuard
  // (planning/timing_guard.hpp): they may hold a staged batch.
  CudnnEngine *cudnn = nullptr;
  DeviceTimingMemory memory(*this);
  if (fast & kFastCudnn) {
    std::string why_not;
    cudnn = backend_.cudnn(index_, &why_not);
    if (!cudnn) cudnn_ = "cudnn unavailable: " + why_not;
  }
  // The op as cuDNN when it is timed faster than `action`, else `action`.
  auto cudnn_or = [&](const auto &o, const char *kind, int *count, Action action) -> Action {
    if (!cudnn) return action;
    EngineChoice c;
    std::unique_ptr<CudnnCall> call;
    std::optional<TimingGuard> guard;
    try {
      guard.emplace(memory, timed_buffers(o));
    } catch (const Error &e) {
      // No room for the copies: the op keeps its own path, untimed, rather
      // than the program fail to compile for an optional engine.
      if (e.status() != KILN_ERROR_OUT_OF_MEMORY) throw;
      c.note = std::string("not timed: ") + e.what();
    }
    if (guard) {
      c = cudnn->choose_linear(o, [&] { action(nullptr); }, &call);
      guard->restore();
    }
    cudnn_ += (cudnn_.empty() ? "" : "; ") + engine_note(kind, o, c);
    if (!call) return action;
    ++*count;
    return [this, shared = std::shared_ptr<CudnnCall>(std::move(call))](const StepParams *) {
      shared->execute(backend_.launch(index_));
    };
  };

  for (size_t i = 0; i < ops.size(); ++i) {
    const StepOp &op = ops[i];
    Action kernels = kernels_of(op);
    if (auto *f = std::get_if<LinearOp>(&op)) {
      ++linear_;
      const FusedProduct *forward = plan.find(i, ProductKind::Forward);
      const bool paired = forward && forward->pair >= 0;
      Action action = kernels;
      if (forward)
        action = [this, product = fused_of(i, ProductKind::Forward)](const StepParams *) {
          backend_.matmuls(index_).run(backend_.launch(index_), *product);
        };
      const int before = cudnn_linear_;
      if (!paired) action = cudnn_or(*f, "linear", &cudnn_linear_, action);
      if (cudnn_linear_ == before && forward) ++fused_linear_;
      actions_.push_back(action);
    } else if (auto *b = std::get_if<LinearBackwardOp>(&op)) {
      ++backward_;
      BackwardPlan bp;
      bp.act_done = plan.act_done[i];
      bp.dw = fused_of(i, ProductKind::WeightGrad);
      bp.dx = fused_of(i, ProductKind::InputGrad);
      const bool paired = bp.act_done || bp.dx;
      const bool any = bp.act_done || bp.dw || bp.dx;
      Action action = kernels;
      if (any) action = [this, o = *b, bp](const StepParams *) { run_backward(o, bp); };
      const int before = cudnn_backward_;
      if (!paired) action = cudnn_or(*b, "linear_backward", &cudnn_backward_, action);
      if (cudnn_backward_ == before && any) ++fused_backward_;
      actions_.push_back(action);
    } else {
      actions_.push_back(kernels);
    }
  }
}

// The op as core's plain sequence of kernels (run_op).
CudaExecutable::Action CudaExecutable::kernels_of(const StepOp &op) {
  return [this, op](const StepParams *step) { run_op(backend_, index_, op, step); };
}

// core's linear_backward, with whichever parts `plan` fused.
void CudaExecutable::run_backward(const LinearBackwardOp &op, const BackwardPlan &plan) {
  Gemm &gemm = backend_.matmuls(index_);
  if (op.act != UnaryOp::Identity && !plan.act_done)
    backend_.act_backward(index_, backward_act(op));
  if (plan.dw) {
    gemm.run(backend_.launch(index_), *plan.dw);
  } else {
    backend_.gemm(index_, weight_grad_product(op));
    if (op.db && !plan.act_done) backend_.bias_grad(index_, bias_grad_of(op));
  }
  if (!op.dx) return;
  if (plan.dx) gemm.run(backend_.launch(index_), *plan.dx);
  else backend_.gemm(index_, input_grad_product(op));
}

void CudaExecutable::run_step(const StepParams *step) {
  for (const Action &a : actions_) a(step);
}

void CudaExecutable::run_steps(int64_t first, int64_t count) {
  if (count <= 0) return;
  CudaBackend::Scope scope(backend_, index_);
  if (graphs_) graphs_->run(first, count);
  else run_table_steps(first, count);
}

void CudaExecutable::run_table_steps(int64_t first, int64_t count) {
  for (int64_t s = first; s < first + count; ++s) run_step(program_.table + s);
}

void CudaExecutable::set_cursor(int64_t first) { cuda::set_cursor(backend_.launch(index_), &cursor_->next, first); }

void CudaExecutable::run_cursor_step() {
  advance_step(backend_.launch(index_), program_.table, &cursor_->next, &cursor_->current);
  run_step(&cursor_->current);
}

void CudaExecutable::launch(Graph g) {
  KILN_CUDA_TRY(cudaGraphLaunch(static_cast<cudaGraphExec_t>(g), backend_.launch(index_).stream),
                "launching the CUDA graph of " + program_.label);
}

void CudaExecutable::destroy(Graph g) noexcept { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g)); }

// Captures `steps` steps on the executable's own stream. ThreadLocal mode: a
// call this thread must not make during capture fails instead of being
// silently captured or run, and other threads are not disturbed.
StepLauncher::Graph CudaExecutable::capture(int64_t steps) {
  const std::string what = "capturing " + std::to_string(steps) + " steps of " + program_.label + " as a CUDA graph";
  cudaGraph_t graph = nullptr;
  {
    CudaBackend::Redirect redirect(index_, capture_stream_);
    KILN_CUDA_TRY(cudaStreamBeginCapture(capture_stream_, cudaStreamCaptureModeThreadLocal), what);
    auto abandon = [&] {  // ends the capture so the stream is usable again; the error thrown says why
      cudaGraph_t partial = nullptr;
      if (cudaStreamEndCapture(capture_stream_, &partial) == cudaSuccess && partial) cudaGraphDestroy(partial);
      cudaGetLastError();
    };
    try {
      for (int64_t s = 0; s < steps; ++s) run_cursor_step();
    } catch (const Error &e) {
      abandon();
      fail(e.status(), std::string(e.what()) + ", while " + what);
    } catch (...) {
      abandon();
      throw;
    }
    KILN_CUDA_TRY(cudaStreamEndCapture(capture_stream_, &graph), what);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  KILN_CUDA_TRY(e, what);
  return exec;
}

std::string CudaExecutable::describe() const {
  std::string s;
  if (!narrow_.empty())
    s = "narrow step kernels (" + narrow_ + ")";
  else if (fused_linear_ + fused_backward_ > 0)
    s = "cublaslt epilogues (" + std::to_string(fused_linear_) + " of " + std::to_string(linear_) + " linear, " +
        std::to_string(fused_backward_) + " of " + std::to_string(backward_) + " linear_backward)";
  else
    s = "kernels";
  if (cudnn_linear_ + cudnn_backward_ > 0)
    s += ", cudnn (" + std::to_string(cudnn_linear_) + " of " + std::to_string(linear_) + " linear, " +
         std::to_string(cudnn_backward_) + " of " + std::to_string(backward_) + " linear_backward)";
  if (!cudnn_.empty()) s += " [" + cudnn_ + "]";
  if (graphs_) s += ", " + graphs_->describe();
  return s;
}

}  // namespace

std::unique_ptr<Executable> compile_cuda(CudaBackend &backend, int64_t index, const StepProgram &program) {
  return std::make_unique<CudaExecutable>(backend, index, program);
}

}  // namespace kiln::cuda
