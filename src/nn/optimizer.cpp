#include "nn/optimizer.hpp"

#include <cmath>

#include "core/error.hpp"

namespace kiln {

const char *optimizer_name(kiln_optimizer_kind kind) {
  switch (kind) {
    case KILN_OPTIM_SGD: return "sgd";
    case KILN_OPTIM_ADAM: return "adam";
    case KILN_OPTIM_ADAMW: return "adamw";
  }
  return "?";
}

void check_optimizer_config(const OptimizerConfig &c) {
  check(c.kind >= KILN_OPTIM_SGD && c.kind <= KILN_OPTIM_ADAMW, KILN_ERROR_INVALID_ARGUMENT,
        "unknown optimizer kind " + std::to_string(int(c.kind)));
  check(std::isfinite(c.momentum) && c.momentum >= 0, KILN_ERROR_INVALID_ARGUMENT,
        "momentum must be >= 0, got " + std::to_string(c.momentum));
  check(std::isfinite(c.weight_decay) && c.weight_decay >= 0, KILN_ERROR_INVALID_ARGUMENT,
        "weight decay must be >= 0, got " + std::to_string(c.weight_decay));
  check(!c.nesterov || c.kind != KILN_OPTIM_SGD || c.momentum > 0, KILN_ERROR_INVALID_ARGUMENT,
        "nesterov momentum needs momentum > 0 (got momentum 0)");
  check(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1, KILN_ERROR_INVALID_ARGUMENT,
        "betas must be in [0, 1), got (" + std::to_string(c.beta1) + ", " + std::to_string(c.beta2) + ")");
  check(std::isfinite(c.eps) && c.eps > 0, KILN_ERROR_INVALID_ARGUMENT, "eps must be > 0, got " + std::to_string(c.eps));
}

Optimizer::Optimizer(const OptimizerConfig &config, const Tensor &params) : config_(config) {
  check_optimizer_config(config);
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

StepOp Optimizer::update_op(const Tensor &params, const Tensor &grads) const {
  const OptimizerConfig &c = config_;
  if (c.kind == KILN_OPTIM_SGD) {
    SgdOp op;
    op.args.t = params.dtype();
    op.args.n = params.numel();
    op.args.params = params.data();
    op.args.grads = grads.data();
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
  op.args.grads = grads.data();
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
    return {{"momentum_buffer", first_}};
  }
  return {{"exp_avg", first_}, {"exp_avg_sq", second_}};
}

}  // namespace kiln
