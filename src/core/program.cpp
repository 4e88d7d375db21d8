// The default compilation of step programs: each op as the plain sequence of
// the backend's kernels. See core/program.hpp.
#include "core/program.hpp"

#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>

#include "core/error.hpp"
#include "core/excerpt.hpp"

namespace kiln {

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

void linear_forward(Backend &b, int64_t dev, const LinearOp &op) {
  b.gemm(dev, forward_product(op));
  if (op.b || op.act != UnaryOp::Identity) b.bias_act(dev, forward_bias_act(op));
}

// The bias gradient right after the activation's backward, which has just
// written dy: the products stream the weights and their gradients through
// the cache, and would make it read dy back from the L3 or memory.
void linear_backward(Backend &b, int64_t dev, const LinearBackwardOp &op) {
  if (op.act != UnaryOp::Identity) b.act_backward(dev, backward_act(op));
  if (op.db) b.bias_grad(dev, bias_grad_of(op));
  b.gemm(dev, weight_grad_product(op));
  if (op.dx) b.gemm(dev, input_grad_product(op));
}

void loss(Backend &b, int64_t dev, const LossOp &op) {
  switch (op.kind) {
    case KILN_LOSS_CROSS_ENTROPY:
      b.cross_entropy(dev, op.args);
      break;
    case KILN_LOSS_MSE:
      b.mse(dev, op.args);
      break;
    case KILN_LOSS_BCE_WITH_LOGITS:
      b.bce_with_logits(dev, op.args);
      break;
  }
}

// Whether [p, p + bytes) lies inside t's memory.
bool within(const Tensor &t, const void *p, int64_t bytes) {
  const char *begin = static_cast<const char *>(t.data()), *q = static_cast<const char *>(p);
  return q >= begin && bytes <= t.nbytes() && q - begin <= t.nbytes() - bytes;
}

// The parameters an op updates, as (pointer, bytes); null for other ops.
std::pair<const void *, int64_t> updated_parameters(const StepOp &op) {
  if (const auto *sgd = std::get_if<SgdOp>(&op)) return {sgd->args.params, sgd->args.n * dtype_size(sgd->args.t)};
  if (const auto *adam = std::get_if<AdamOp>(&op)) return {adam->args.params, adam->args.n * dtype_size(adam->args.t)};
  return {nullptr, 0};
}

class DefaultExecutable final : public Executable {
 public:
  DefaultExecutable(Backend &b, int64_t index, const StepProgram &p)
      : Executable(p), backend_(b), index_(index), program_(p) {}

 protected:
  void run_steps(int64_t first, int64_t count) override {
    for (int64_t s = first; s < first + count; ++s)
      for (const StepOp &op : program_.ops) run_op(backend_, index_, op, program_.table + s);
  }

 private:
  Backend &backend_;
  int64_t index_;
  StepProgram program_;
};

}  // namespace

namespace {

// The FastPath bits the comma-separated list in environment variable `var`
// names (0 when it is unset or empty).
uint32_t fast_path_names(const char *var) {
  const char *env = std::getenv(var);
  uint32_t bits = 0;
  if (!env) return bits;
  const std::string list = env;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = list.find(',', start);
    const std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name == "epilogues") bits |= kFastEpilogues;
    else if (name == "graphs") bits |= kFastGraphs;
    else if (name == "cudnn") bits |= kFastCudnn;
    else if (name == "narrow") bits |= kFastNarrow;
    else if (name == "all") bits |= kFastAll;
    else if (!name.empty())
      fail(KILN_ERROR_INVALID_ARGUMENT, std::string(var) + " names \"" + excerpt(name, 32) +
                                            "\"; expected a comma-separated list of epilogues, graphs, cudnn, narrow or all");
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return bits;
}

}  // namespace

uint32_t fast_path_with_env(uint32_t asked) {
  const uint32_t enabled = fast_path_names("KILN_ENABLE");
  const uint32_t disabled = fast_path_names("KILN_DISABLE");
  return (asked | enabled) & ~disabled & kFastAll;
}

GemmArgs forward_product(const LinearOp &op) {
  GemmArgs g;
  g.t = op.t;
  g.trans_b = true;
  g.m = op.rows, g.n = op.out, g.k = op.in;
  g.a = op.x, g.b = op.w, g.c = op.y;
  g.math = op.math;
  return g;
}

GemmArgs weight_grad_product(const LinearBackwardOp &op) {
  GemmArgs g;
  g.t = op.t;
  g.trans_a = true;
  g.m = op.out, g.n = op.in, g.k = op.rows;
  g.a = op.dy, g.b = op.x, g.c = op.dw;
  g.math = op.math;
  return g;
}

GemmArgs input_grad_product(const LinearBackwardOp &op) {
  GemmArgs g;
  g.t = op.t;
  g.m = op.rows, g.n = op.in, g.k = op.out;
  g.a = op.dy, g.b = op.w, g.c = op.dx;
  g.math = op.math;
  return g;
}

BiasActArgs forward_bias_act(const LinearOp &op) {
  BiasActArgs a;
  a.t = op.t;
  a.rows = op.rows, a.cols = op.out;
  a.y = op.y, a.bias = op.b, a.pre = op.pre;
  a.act = op.act, a.alpha = op.alpha, a.threshold = op.threshold;
  return a;
}

ActBackwardArgs backward_act(const LinearBackwardOp &op) {
  ActBackwardArgs a;
  a.t = op.t;
  a.n = op.rows * op.out;
  a.act = op.act, a.alpha = op.alpha, a.threshold = op.threshold;
  a.dy = op.dy, a.pre = op.pre, a.y = op.y, a.dx = op.dy;
  return a;
}

BiasGradArgs bias_grad_of(const LinearBackwardOp &op) {
  BiasGradArgs a;
  a.t = op.t;
  a.rows = op.rows, a.cols = op.out;
  a.dy = op.dy, a.db = op.db;
  return a;
}

const char *op_name(const StepOp &op) {
  return std::visit(Overloaded{[](const GatherOp &) { return "gather"; }, [](const CastOp &) { return "cast"; },
                               [](const LinearOp &) { return "linear"; },
                               [](const ActivationOp &) { return "activation"; },
                               [](const DropoutOp &) { return "dropout"; }, [](const LossOp &) { return "loss"; },
                               [](const LinearBackwardOp &) { return "linear_backward"; },
                               [](const ActivationBackwardOp &) { return "activation_backward"; },
                               [](const DropoutBackwardOp &) { return "dropout_backward"; },
                               [](const AllReduceStartOp &) { return "allreduce_start"; },
                               [](const AllReduceWaitOp &) { return "allreduce_wait"; },
                               [](const ClipOp &) { return "clip"; }, [](const SgdOp &) { return "sgd"; },
                               [](const AdamOp &) { return "adam"; }},
                    op);
}

void run_op(Backend &b, int64_t dev, const StepOp &op, const StepParams *step) {
  std::visit(
      Overloaded{
          [&](const GatherOp &o) { b.gather(dev, o.args, step); },
          [&](const CastOp &o) { b.cast(dev, o.args); },
          [&](const LinearOp &o) { linear_forward(b, dev, o); },
          [&](const ActivationOp &o) { b.unary(dev, o.args); },
          [&](const DropoutOp &o) { b.dropout(dev, o.args, step); },
          [&](const LossOp &o) { loss(b, dev, o); },
          [&](const LinearBackwardOp &o) { linear_backward(b, dev, o); },
          [&](const ActivationBackwardOp &o) { b.act_backward(dev, o.args); },
          [&](const DropoutBackwardOp &o) { b.dropout_backward(dev, o.args); },
          [&](const AllReduceStartOp &o) {
            const Device device{b.kind(), b.kind() == KILN_DEVICE_CPU ? -1 : dev};
            o.comm->allreduce_start(device, o.t, o.buf, o.n, o.mean, b.queue(dev));
          },
          [&](const AllReduceWaitOp &o) { o.comm->allreduce_wait(); },
          [&](const ClipOp &o) { b.clip_grad_norm(dev, o.args); },
          [&](const SgdOp &o) { b.sgd_update(dev, o.args, step); },
          [&](const AdamOp &o) { b.adam_update(dev, o.args, step); },
      },
      op);
}

Executable::Executable(const StepProgram &program) : writes_(program.writes) {
  for (const StepOp &op : program.ops) {
    const auto [params, bytes] = updated_parameters(op);
    if (!params || bytes == 0) continue;
    bool declared = false;
    for (const Tensor &t : writes_) declared = declared || within(t, params, bytes);
    if (!declared)
      fail(KILN_ERROR_INTERNAL, std::string("step program \"") + program.label + "\" updates parameters that are "
                                "not among its writes, so what was derived from them would go stale");
  }
}

void Executable::run(int64_t first, int64_t count) {
  run_steps(first, count);
  for (const Tensor &t : writes_) t.note_written();
}

std::unique_ptr<Executable> compile_default(Backend &b, int64_t index, const StepProgram &program) {
  return std::make_unique<DefaultExecutable>(b, index, program);
}

std::unique_ptr<Executable> Backend::compile(int64_t index, const StepProgram &program) {
  return compile_default(*this, index, program);
}

}  // namespace kiln
