// Optimizers with torch.optim's exact semantics (SGD with momentum, nesterov
// and weight decay; Adam; AdamW), each step one backend kernel over the flat
// parameter and gradient buffers (nn/model.hpp). State lives in buffers of
// the same flat layout.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/program.hpp"
#include "core/tensor.hpp"

namespace kiln {

// The defaults and ranges are the trainer options table's
// (train/options_table.h), which TrainerOptions applies.
struct OptimizerConfig {
  kiln_optimizer_kind kind = KILN_OPTIM_SGD;
  double momentum = 0;
  bool nesterov = false;
  double weight_decay = 0;
  double beta1 = 0, beta2 = 0, eps = 0;
};


class Optimizer {
 public:
  // State buffers shaped as `params` (the model's flat buffer), zeroed.
  // INVALID_ARGUMENT for nesterov without momentum.
  Optimizer(const OptimizerConfig &config, const Tensor &params);

  const OptimizerConfig &config() const { return config_; }
  // The update op of params from grads (flat buffers of the state's layout
  // and dtype, on its device): its lr and step number come from the step's
  // StepParams, so the trainer counts the update with set_steps.
  StepOp update_op(const Tensor &params, void *grads) const;
  // Updates done (Adam's bias correction and SGD's first-step buffer use it).
  int64_t steps() const { return steps_; }
  void set_steps(int64_t steps) { steps_ = steps; }
  // The state buffers by name, as torch.optim's state_dict calls them
  // (kMomentumBuffer, "exp_avg", "exp_avg_sq"); empty for plain SGD.
  std::vector<std::pair<std::string, Tensor>> state() const;
  // SGD's one buffer, which only momentum needs: a checkpoint may hold it or
  // not whatever this optimizer's momentum (train/checkpoint.cpp).
  static constexpr const char *kMomentumBuffer = "momentum_buffer";

 private:
  OptimizerConfig config_;
  Tensor first_, second_;  // momentum_buffer / exp_avg, exp_avg_sq
  int64_t steps_ = 0;
};

}  // namespace kiln
