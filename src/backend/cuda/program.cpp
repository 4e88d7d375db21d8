// CudaExecutable: the CUDA fast path of step programs; see program.hpp.
#include "backend/cuda/program.hpp"

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/check.hpp"
#include "backend/cuda/cuda_backend.hpp"

namespace kiln::cuda {
namespace {

constexpr int64_t kMaxGraphSteps = 1024;  // longer runs replay the one-step graph (bounded capture time and memory)
constexpr size_t kMaxGraphs = 4;          // distinct run lengths cached, besides the one-step graph

// Who runs a Linear layer (forward or backward) without cuDNN. With
// kFastCudnn, plan_fused_ops times cuDNN against that choice per shape
// (CudnnEngine::choose_linear) and keeps the faster.
enum class LinearEngine { Kernels, CublasLt };

// cuBLASLt fuses a bias and ReLU, nothing kiln needs besides: its GELU is the
// tanh approximation, not torch's exact GELU that kiln computes, and it has
// no tanh, sigmoid or leaky ReLU. f64 products go through legacy cuBLAS,
// which has no epilogues; no epilogue writes a kept pre-activation; and a
// product without bias or activation has nothing to fuse.
LinearEngine choose_linear_engine(const LinearOp &op, uint32_t fast_path) {
  if (!(fast_path & kFastEpilogues) || op.t == DType::F64 || op.pre) return LinearEngine::Kernels;
  if (op.act == UnaryOp::Relu || (op.act == UnaryOp::Identity && op.b)) return LinearEngine::CublasLt;
  return LinearEngine::Kernels;
}

// The backward's products take bias gradients and the ReLU gradient of the
// layer below whatever this layer's activation is (its own gradient, if not
// fused into the layer above, runs as a kernel first).
LinearEngine choose_linear_backward_engine(const LinearBackwardOp &op, uint32_t fast_path) {
  if (!(fast_path & kFastEpilogues) || op.t == DType::F64) return LinearEngine::Kernels;
  return LinearEngine::CublasLt;
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

class CudaExecutable final : public Executable {
 public:
  CudaExecutable(CudaBackend &backend, int64_t index, const StepProgram &program);
  ~CudaExecutable() override;
  std::string describe() const override;

 protected:
  void run_steps(int64_t first, int64_t count) override;

 private:
  using Action = std::function<void(const StepParams *step)>;

  void plan_fused_ops();
  void *alloc_owned(int64_t bytes);
  void run_step(const StepParams *step);
  void run_backward(const LinearBackwardOp &op, const BackwardPlan &plan);
  cudaGraphExec_t graph(int64_t steps);
  cudaGraphExec_t capture(int64_t steps);

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
  std::string cudnn_;  // describe()'s cuDNN part: the per-op choices, or why cuDNN is unavailable
  Cursor *cursor_ = nullptr;
  cudaStream_t capture_stream_ = nullptr;
  std::map<int64_t, cudaGraphExec_t> graphs_;  // by steps
  bool warm_ = false;                          // an eager step has run
};

CudaExecutable::CudaExecutable(CudaBackend &backend, int64_t index, const StepProgram &program)
    : Executable(program), backend_(backend), index_(index), program_(program) {
  try {
    plan_fused_ops();
    if (program_.fast_path & kFastGraphs) {
      cursor_ = static_cast<Cursor *>(alloc_owned(sizeof(Cursor)));
      KILN_CUDA_TRY(cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking),
                    "the capture stream of " + program_.label);
    }
  } catch (...) {
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
    for (auto &g : graphs_) cudaGraphExecDestroy(g.second);
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

// Pairs each ReLU layer's backward with the backward before it (the layer
// above), whose dx product is the ReLU's incoming gradient: that product takes
// DRELU[_BGRAD] from the bit-mask the layer's forward writes with
// RELU_AUX[_BIAS]. Both products must find an algorithm, or neither is
// fused. Every other fusable op gets its plain epilogue.
void CudaExecutable::plan_fused_ops() {
  const std::vector<StepOp> &ops = program_.ops;
  const uint32_t fast = program_.fast_path;
  Gemm &gemm = backend_.matmuls(index_);
  std::map<const void *, size_t> forward_by_y;  // LinearOp index by output
  for (size_t i = 0; i < ops.size(); ++i)
    if (auto *f = std::get_if<LinearOp>(&ops[i])) forward_by_y[f->y] = i;

  std::map<size_t, std::shared_ptr<const Gemm::Fused>> forward;
  std::map<size_t, BackwardPlan> backward;
  for (size_t i = 1; i < ops.size(); ++i) {
    const auto *below = std::get_if<LinearBackwardOp>(&ops[i]);
    // A gradient bucket's cast and allreduce start may sit between the two:
    // they read only gradients written before them (core/program.hpp).
    size_t j = i - 1;
    while (j > 0 && (std::holds_alternative<AllReduceStartOp>(ops[j]) || std::holds_alternative<CastOp>(ops[j]))) --j;
    const auto *above = std::get_if<LinearBackwardOp>(&ops[j]);
    if (!below || !above || below->act != UnaryOp::Relu || !above->dx || above->dx != below->dy ||
        above->rows != below->rows || above->in != below->out)
      continue;
    auto f = forward_by_y.find(below->y);
    if (f == forward_by_y.end()) continue;
    const LinearOp &fwd = std::get<LinearOp>(ops[f->second]);
    if (fwd.act != UnaryOp::Relu || fwd.rows != below->rows || fwd.out != below->out ||
        choose_linear_engine(fwd, fast) != LinearEngine::CublasLt ||
        choose_linear_backward_engine(*above, fast) != LinearEngine::CublasLt)
      continue;
    // The bit-mask has the shape of cuBLAS's D, [out, rows] column-major,
    // one bit per element, its leading dimension a multiple of 128 bits.
    const int64_t ld = (fwd.out + 127) / 128 * 128;
    void *mask = alloc_owned(ld / 8 * fwd.rows);
    Epilogue keep{fwd.b ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_AUX, const_cast<void *>(fwd.b),
                  mask, ld};
    Epilogue grad{below->db ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DRELU, below->db, mask, ld};
    auto fused_forward = gemm.fuse(forward_product(fwd), keep);
    auto fused_dx = gemm.fuse(input_grad_product(*above), grad);
    if (!fused_forward || !fused_dx) {
      backend_.free(index_, mask);
      owned_.pop_back();
      continue;
    }
    forward[f->second] = fused_forward;
    backward[j].dx = fused_dx;
    backward[i].act_done = true;
  }

  // cuDNN may take any Linear op that is not half of a ReLU pair above (the
  // pair shares a bit-mask only cuBLASLt writes and reads). Its timing runs
  // the op on the program's own buffers, which the step rewrites before it
  // reads them (CudnnEngine::choose_linear).
  CudnnEngine *cudnn = nullptr;
  if (fast & kFastCudnn) {
    std::string why_not;
    cudnn = backend_.cudnn(index_, &why_not);
    if (!cudnn) cudnn_ = "cudnn unavailable: " + why_not;
  }
  // The op as cuDNN when it is timed faster than `action`, else `action`.
  auto cudnn_or = [&](const auto &o, const char *kind, int *count, Action action) -> Action {
    if (!cudnn) return action;
    std::unique_ptr<CudnnCall> call;
    const EngineChoice c = cudnn->choose_linear(o, [&] { action(nullptr); }, &call);
    cudnn_ += (cudnn_.empty() ? "" : "; ") + engine_note(kind, o, c);
    if (!call) return action;
    ++*count;
    return [this, shared = std::shared_ptr<CudnnCall>(std::move(call))](const StepParams *) {
      shared->execute(backend_.launch(index_));
    };
  };

  for (size_t i = 0; i < ops.size(); ++i) {
    const StepOp &op = ops[i];
    Action kernels = [this, o = op](const StepParams *step) { run_op(backend_, index_, o, step); };
    if (auto *f = std::get_if<LinearOp>(&op)) {
      ++linear_;
      const bool paired = forward.count(i) > 0;
      if (!paired && choose_linear_engine(*f, fast) == LinearEngine::CublasLt) {
        const cublasLtEpilogue_t kind = f->act == UnaryOp::Relu
                                            ? (f->b ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU)
                                            : CUBLASLT_EPILOGUE_BIAS;
        if (auto fused = gemm.fuse(forward_product(*f), Epilogue{kind, const_cast<void *>(f->b), nullptr, 0}))
          forward[i] = fused;
      }
      Action action = kernels;
      if (forward.count(i))
        action = [this, fused = forward[i]](const StepParams *) {
          backend_.matmuls(index_).run(backend_.launch(index_), *fused);
        };
      const int before = cudnn_linear_;
      if (!paired) action = cudnn_or(*f, "linear", &cudnn_linear_, action);
      if (cudnn_linear_ == before && forward.count(i)) ++fused_linear_;
      actions_.push_back(action);
    } else if (auto *b = std::get_if<LinearBackwardOp>(&op)) {
      ++backward_;
      BackwardPlan &plan = backward[i];
      const bool paired = plan.act_done || plan.dx;
      if (b->db && !plan.act_done && choose_linear_backward_engine(*b, fast) == LinearEngine::CublasLt)
        plan.dw = gemm.fuse(weight_grad_product(*b), Epilogue{CUBLASLT_EPILOGUE_BGRADB, b->db, nullptr, 0});
      const bool fused = plan.act_done || plan.dw || plan.dx;
      Action action = kernels;
      if (fused) action = [this, o = *b, plan](const StepParams *) { run_backward(o, plan); };
      const int before = cudnn_backward_;
      if (!paired) action = cudnn_or(*b, "linear_backward", &cudnn_backward_, action);
      if (cudnn_backward_ == before && fused) ++fused_backward_;
      actions_.push_back(action);
    } else {
      actions_.push_back(kernels);
    }
  }
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
  if (!(program_.fast_path & kFastGraphs)) {
    for (int64_t s = first; s < first + count; ++s) run_step(program_.table + s);
    return;
  }
  const Launch L = backend_.launch(index_);
  set_cursor(L, &cursor_->next, first);
  if (!warm_) {
    advance_step(L, program_.table, &cursor_->next, &cursor_->current);
    run_step(&cursor_->current);
    warm_ = true;
    if (--count == 0) return;
  }
  const std::string what = "launching the CUDA graph of " + program_.label;
  if (cudaGraphExec_t whole = graph(count)) {
    KILN_CUDA_TRY(cudaGraphLaunch(whole, L.stream), what);
    return;
  }
  cudaGraphExec_t one = graph(1);
  for (int64_t s = 0; s < count; ++s) KILN_CUDA_TRY(cudaGraphLaunch(one, L.stream), what);
}

// The graph of `steps` steps: cached, captured now, or null when that length
// is not worth a graph of its own (the caller then replays the one-step graph).
cudaGraphExec_t CudaExecutable::graph(int64_t steps) {
  auto found = graphs_.find(steps);
  if (found != graphs_.end()) return found->second;
  const size_t multi_step = graphs_.size() - graphs_.count(1);
  if (steps != 1 && (steps > kMaxGraphSteps || multi_step >= kMaxGraphs)) return nullptr;
  cudaGraphExec_t exec = capture(steps);
  graphs_[steps] = exec;
  return exec;
}

// Captures `steps` steps on the executable's own stream. ThreadLocal mode: a
// call this thread must not make during capture fails instead of being
// silently captured or run, and other threads are not disturbed.
cudaGraphExec_t CudaExecutable::capture(int64_t steps) {
  const std::string what = "capturing " + std::to_string(steps) + " steps of " + program_.label +
                           " as a CUDA graph (KILN_DISABLE=graphs runs without)";
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
      const Launch L = backend_.launch(index_);
      for (int64_t s = 0; s < steps; ++s) {
        advance_step(L, program_.table, &cursor_->next, &cursor_->current);
        run_step(&cursor_->current);
      }
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
  if (fused_linear_ + fused_backward_ > 0)
    s = "cublaslt epilogues (" + std::to_string(fused_linear_) + " of " + std::to_string(linear_) + " linear, " +
        std::to_string(fused_backward_) + " of " + std::to_string(backward_) + " linear_backward)";
  else
    s = "kernels";
  if (cudnn_linear_ + cudnn_backward_ > 0)
    s += ", cudnn (" + std::to_string(cudnn_linear_) + " of " + std::to_string(linear_) + " linear, " +
         std::to_string(cudnn_backward_) + " of " + std::to_string(backward_) + " linear_backward)";
  if (!cudnn_.empty()) s += " [" + cudnn_ + "]";
  if (!(program_.fast_path & kFastGraphs)) return s;
  s += ", CUDA graphs";
  if (graphs_.empty()) return s + " (captured at the second step)";
  std::string lengths;
  for (const auto &g : graphs_) lengths += (lengths.empty() ? "" : ", ") + std::to_string(g.first);
  return s + " of " + lengths + " steps";
}

}  // namespace

std::unique_ptr<Executable> compile_cuda(CudaBackend &backend, int64_t index, const StepProgram &program) {
  return std::make_unique<CudaExecutable>(backend, index, program);
}

}  // namespace kiln::cuda
