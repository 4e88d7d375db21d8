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

void Optimizer::step(const Tensor &params, const Tensor &grads, double lr) {
  Backend &b = params.backend();
  const int64_t dev = params.device().index;
  const OptimizerConfig &c = config_;
  if (c.kind == KILN_OPTIM_SGD)
    b.sgd_update(dev, params.dtype(), params.numel(), params.data(), grads.data(),
                 first_.defined() ? first_.data() : nullptr, lr, c.momentum, c.weight_decay, c.nesterov, steps_ == 0);
  else
    b.adam_update(dev, params.dtype(), params.numel(), params.data(), grads.data(), first_.data(), second_.data(), lr,
                  c.beta1, c.beta2, c.eps, c.weight_decay, c.kind == KILN_OPTIM_ADAMW, steps_ + 1);
  ++steps_;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  if (config_.kind == KILN_OPTIM_SGD) {
    if (!first_.defined()) return {};
    return {{"momentum_buffer", first_}};
  }
  return {{"exp_avg", first_}, {"exp_avg_sq", second_}};
}

}  // namespace kiln
