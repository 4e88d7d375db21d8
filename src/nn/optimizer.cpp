#include "nn/optimizer.hpp"

#include "core/error.hpp"

namespace kiln {

Optimizer::Optimizer(const OptimizerConfig &config, const Tensor &params) : config_(config) {
  // Each value's range is the trainer options table's (train/options_table.h);
  // this is the one rule between two of them.
  check(!config.nesterov || config.kind != KILN_OPTIM_SGD || config.momentum > 0, KILN_ERROR_INVALID_ARGUMENT,
        "nesterov momentum needs momentum > 0 (got momentum 0)");
  const auto zeros = [&] {
    return Tensor::full(params.context(), params.shape(), params.dtype(), params.device(), 0.0);
  };
  if (config.kind == KILN_OPTIM_SGD) {
    if (config.momentum != 0) first_ = zeros();
  } else {
    first_ = zeros();
    second_ = zeros();
  }
}

StepOp Optimizer::update_op(const Tensor &params, void *grads) const {
  const OptimizerConfig &c = config_;
  if (c.kind == KILN_OPTIM_SGD) {
    SgdOp op;
    op.args.t = params.dtype();
    op.args.n = params.numel();
    op.args.params = params.data();
    op.args.grads = grads;
    op.args.velocity = first_.defined() ? first_.data() : nullptr;
    op.args.momentum = c.momentum;
    op.args.weight_decay = c.weight_decay;
    op.args.nesterov = c.nesterov;
    return op;
  }
  AdamOp op;
  op.args.t = params.dtype();
  op.args.n = params.numel();
  op.args.params = params.data();
  op.args.grads = grads;
  op.args.m = first_.data();
  op.args.v = second_.data();
  op.args.beta1 = c.beta1, op.args.beta2 = c.beta2, op.args.eps = c.eps;
  op.args.weight_decay = c.weight_decay;
  op.args.decoupled = c.kind == KILN_OPTIM_ADAMW;
  return op;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  if (config_.kind == KILN_OPTIM_SGD) {
    if (!first_.defined()) return {};
    return {{kMomentumBuffer, first_}};
  }
  return {{"exp_avg", first_}, {"exp_avg_sq", second_}};
}

}  // namespace kiln
