// Learning-rate schedules, in optimisation steps (0-based: the lr of step t):
//   constant  lr
//   step      lr * gamma^floor(t / step_size)
//   cosine    min_lr + (lr - min_lr) * (1 + cos(pi * t / T)) / 2 for t < T,
//             min_lr after (T = total_steps, or the fit's when that is 0)
// and a linear warmup multiplying the above by (t + 1) / warmup for t < warmup.
#pragma once

#include <cstdint>

#include "kiln/kiln.h"

namespace kiln {

// The defaults and ranges are the trainer options table's
// (train/options_table.h), which TrainerOptions applies.
struct ScheduleConfig {
  kiln_lr_schedule kind = KILN_LR_CONSTANT;
  int64_t step_size = 0;
  double gamma = 0;
  int64_t total_steps = 0;
  double min_lr = 0;
  int64_t warmup = 0;
};

// The lr of step t. fit_total is the step count at which a running fit
// ends (0 outside fit); COSINE with total_steps 0 needs it (INVALID_ARGUMENT
// otherwise).
double scheduled_lr(const ScheduleConfig &config, double lr, int64_t t, int64_t fit_total);

}  // namespace kiln
