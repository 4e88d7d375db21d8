#include "nn/schedule.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"

namespace kiln {

double scheduled_lr(const ScheduleConfig &c, double lr, int64_t t, int64_t fit_total) {
  double value = lr;
  switch (c.kind) {
    case KILN_LR_CONSTANT:
      break;
    case KILN_LR_STEP:
      value = lr * std::pow(c.gamma, double(t / c.step_size));
      break;
    case KILN_LR_COSINE: {
      const int64_t total = c.total_steps > 0 ? c.total_steps : fit_total;
      KILN_CHECK(total > 0, KILN_ERROR_INVALID_ARGUMENT,  // every step
                 "the cosine schedule has total_steps 0, which only kiln_trainer_fit fills in (with its own length); "
                 "set total_steps to use it with kiln_trainer_step or kiln_trainer_epoch");
      const double pi = 3.14159265358979323846;
      value = t >= total ? c.min_lr : c.min_lr + (lr - c.min_lr) * (1 + std::cos(pi * double(t) / double(total))) / 2;
      break;
    }
  }
  if (t < c.warmup) value *= double(t + 1) / double(c.warmup);
  return value;
}

}  // namespace kiln
