// Step programs: a whole training or evaluation step as data. The trainer
// (src/train) builds one program per (model, batch rows, precision, data
// source) from layer-level ops, and the model's device compiles it
// (Backend::compile) into an Executable that runs any number of steps.
//
// Why a program and not kernel calls: a backend that sees the whole step can
// fuse across kernels (a GEMM with its bias and activation as one cuBLASLt
// epilogue) and capture the step, or a run of steps, once as a CUDA graph
// and replay it. That is only possible because nothing in an op changes from
// step to step: every pointer is fixed when the program is built, and the
// values that do change (learning rate, optimizer step, dropout seed, the
// batch's position in the shuffled order) are read by the kernels from a
// table of StepParams in device memory, which the trainer writes ahead.
//
// The default compilation (compile_default) runs the ops as the plain
// sequence of the backend's kernels; it is what the CPU runs, and the
// reference every faster compilation is tested against.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/backend.hpp"
#include "core/collective.hpp"
#include "core/tensor.hpp"

namespace kiln {

// Parts of a backend's fast path, each of which can be switched on and off
// at run time (the trainer option, KILN_ENABLE and KILN_DISABLE, see
// fast_path_with_env) so that a failure can be bisected. A backend ignores
// the bits it has no part for. The bits are the C API's kiln_fast_path.
enum FastPath : uint32_t {
  // CUDA: GEMM + bias + activation (and backward) fused; CPU: plain SGD
  // folded into the weight-gradient products (backend/cpu/program.hpp).
  kFastEpilogues = KILN_FAST_PATH_EPILOGUES,
  kFastGraphs = KILN_FAST_PATH_GRAPHS,  // steps captured as CUDA graphs and replayed
  kFastCudnn = KILN_FAST_PATH_CUDNN,    // cuDNN's fused graphs where measured faster
  // CUDA: a one-hidden-layer step as two of kiln's own kernels
  // (backend/cuda/planning/narrow_step.hpp).
  kFastNarrow = KILN_FAST_PATH_NARROW,
  kFastAll = KILN_FAST_PATH_ALL,
  // What a trainer uses unless told otherwise: cuDNN and the narrow step
  // stay off until a GPU run has shown them correct and faster.
  kFastDefault = kFastEpilogues | kFastGraphs,
};

// `asked` (a trainer's option, or kFastDefault), plus the parts the
// KILN_ENABLE environment variable names, less those KILN_DISABLE names
// (disabling wins). Each is a comma-separated list of "epilogues", "graphs",
// "cudnn", "narrow" or "all"; an unknown name throws INVALID_ARGUMENT naming
// it and the variable.
uint32_t fast_path_with_env(uint32_t asked);

// ---- ops. All pointers are device pointers of the program's device. -------

// Batch assembly (Backend::gather) at the step's offset.
struct GatherOp {
  GatherArgs args;
};

// The low-precision copies of mixed precision (Backend::cast).
struct CastOp {
  CastArgs args;
};

// A Linear layer and the activation fused after it: y = act(x W^T + b), with
// x [rows, in], W [out, in], b [out] (may be null), y [rows, out]. pre (may
// be null) receives x W^T + b, for activations whose gradient needs it
// (act_grad_reads_pre).
struct LinearOp {
  DType t = DType::F32;
  MathMode math = MathMode::Exact;
  int64_t rows = 0, in = 0, out = 0;
  const void *x = nullptr, *w = nullptr, *b = nullptr;
  void *y = nullptr, *pre = nullptr;
  UnaryOp act = UnaryOp::Identity;
  double alpha = 0, threshold = 0;  // act's parameters (UnaryOp)
};

// A lone activation (Backend::unary).
struct ActivationOp {
  UnaryArgs args;
};

// Dropout of one stage; args.stream is the stage number.
struct DropoutOp {
  DropoutArgs args;
};

// The loss `kind` of args.pred against args.target (see LossArgs): adds
// loss sum, correct and bad labels into stats[0..3) and, when dpred is not
// null, writes the gradient of the mean loss (grad_scale = 1 / the mean's
// divisor) w.r.t. pred.
struct LossOp {
  kiln_loss_kind kind = KILN_LOSS_CROSS_ENTROPY;
  LossArgs args;
};

// The backward of a LinearOp: dy [rows, out] (the gradient w.r.t. y) is
// turned in place into the gradient w.r.t. the pre-activation, then
// dW = dy^T x, db = column sums of dy (db may be null), dx = dy W (dx may be
// null: the first trained layer). y and pre are the forward's outputs.
struct LinearBackwardOp {
  DType t = DType::F32;
  MathMode math = MathMode::Exact;
  int64_t rows = 0, in = 0, out = 0;
  void *dy = nullptr;
  const void *x = nullptr, *w = nullptr, *y = nullptr, *pre = nullptr;
  UnaryOp act = UnaryOp::Identity;
  double alpha = 0, threshold = 0;
  void *dw = nullptr, *db = nullptr, *dx = nullptr;
};

// The backward of a lone activation (Backend::act_backward), from its
// input (args.pre) and output (args.y); in place where args.dx is args.dy.
struct ActivationBackwardOp {
  ActBackwardArgs args;
};

struct DropoutBackwardOp {
  DropoutBackwardArgs args;
};

// Global-norm gradient clipping over one flat buffer (Backend::clip_grad_norm).
struct ClipOp {
  ClipArgs args;
};

// Distributed data parallel: buf[0..n) becomes the mean (or sum) of every
// rank's buf, in place (Collective::allreduce_start). The trainer places one
// start per gradient bucket among the backward ops, each right after the op
// that completes its bucket, and one AllReduceWaitOp after the backward,
// before clipping and the optimizer, so every rank applies the same update
// (train/gradient_reduce.hpp). The default meaning hands the collective the
// device's queue (Backend::queue): on a GPU the engine's allreduce follows
// the queued backward work on the GPU and overlaps the backward ops queued
// after it; the wait blocks the host until every started allreduce is done
// (comm throws KILN_ERROR_COMMUNICATION on a timeout or a dead peer).
// Because the wait is on the host, a backend must not capture a program
// holding these ops in a CUDA graph (run it as plain kernels, or capture the
// parts between), and ops placed between two backward ops only read
// gradients the op before wrote.
struct AllReduceStartOp {
  DType t = DType::F32;
  int64_t n = 0;
  void *buf = nullptr;
  bool mean = true;
  Collective *comm = nullptr;  // owned by the trainer, which outlives its programs
};

struct AllReduceWaitOp {
  Collective *comm = nullptr;
};

struct SgdOp {
  SgdArgs args;
};

struct AdamOp {
  AdamArgs args;
};

using StepOp = std::variant<GatherOp, CastOp, LinearOp, ActivationOp, DropoutOp, LossOp, LinearBackwardOp,
                            ActivationBackwardOp, DropoutBackwardOp, AllReduceStartOp, AllReduceWaitOp, ClipOp, SgdOp,
                            AdamOp>;

// The op's name, for logs and error messages ("linear", "loss", ...).
const char *op_name(const StepOp &op);

struct StepProgram {
  std::vector<StepOp> ops;
  int64_t rows = 0;     // batch rows of every step
  bool trains = false;  // ends with a parameter update (false: evaluation)
  // Step i of a run reads table[i]; the table holds table_size entries and
  // lives on the program's device, for the program's whole life.
  const StepParams *table = nullptr;
  int64_t table_size = 0;
  uint32_t fast_path = kFastAll;  // FastPath bits the backend may use
  std::string label;              // e.g. "train 784-32-10 rows 128 fp32", for logs
  // The tensors whose contents a run changes and that others may have
  // derived something from (the model's parameters: its packed inference
  // weights). Executable::run bumps their versions after the steps, and
  // compiling a program whose parameter update (SgdOp, AdamOp) writes
  // outside them is an INTERNAL error, so an update cannot go unnoticed.
  std::vector<Tensor> writes;
  // Where a backend reports what happens to the compiled program while it
  // runs (a CUDA graph capture that failed, and the eager fallback); may be
  // empty. The trainer passes its context's log.
  std::function<void(kiln_log_level, const std::string &)> log;
};

// A compiled program. run() queues steps on the device's stream and returns
// without waiting (the CPU runs them before returning). Used by one thread at
// a time; the buffers the program names must outlive it.
class Executable {
 public:
  // Keeps program.writes; throws INTERNAL when a parameter update of the
  // program writes outside them.
  explicit Executable(const StepProgram &program);
  virtual ~Executable() = default;
  // Runs steps first, first + 1, ..., first + count - 1: step i reads
  // table[i]. 0 <= first, first + count <= table_size (not checked here).
  // Then bumps the versions of the program's `writes`.
  void run(int64_t first, int64_t count);
  // What the compilation chose, for logs and benchmarks (e.g.
  // "cublaslt-epilogues, graph"); "kernels" for the default.
  virtual std::string describe() const { return "kernels"; }

 protected:
  // The backend's part of run.
  virtual void run_steps(int64_t first, int64_t count) = 0;

 private:
  std::vector<Tensor> writes_;
};

// The products of a Linear layer, as run_op computes them; a backend that
// fuses an op (a cuBLASLt epilogue) starts from the same GemmArgs.
GemmArgs forward_product(const LinearOp &op);              // y[rows, out] = x W^T
GemmArgs weight_grad_product(const LinearBackwardOp &op);  // dW[out, in] = dy^T x
GemmArgs input_grad_product(const LinearBackwardOp &op);   // dx[rows, in] = dy W
// Its other kernels: y = act(y + b) after the forward product, dy *= act'
// in place before the backward products, db = column sums of dy.
BiasActArgs forward_bias_act(const LinearOp &op);
ActBackwardArgs backward_act(const LinearBackwardOp &op);
BiasGradArgs bias_grad_of(const LinearBackwardOp &op);

// The default meaning of one op: the plain sequence of kernels of `b`.
void run_op(Backend &b, int64_t index, const StepOp &op, const StepParams *step);

// The default compilation: every step runs run_op over the ops in order.
std::unique_ptr<Executable> compile_default(Backend &b, int64_t index, const StepProgram &program);

}  // namespace kiln
