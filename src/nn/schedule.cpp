#include "nn/schedule.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"

namespace kiln {

void check_schedule_config(const ScheduleConfig &c) {
  check(c.kind >= KILN_LR_CONSTANT && c.kind <= KILN_LR_COSINE, KILN_ERROR_INVALID_ARGUMENT,
        "unknown lr schedule " + std::to_string(int(c.kind)));
  check(c.kind != KILN_LR_STEP || c.step_size >= 1, KILN_ERROR_INVALID_ARGUMENT,
        "the step schedule's step_size must be >= 1, got " + std::to_string(c.step_size));
  check(c.kind != KILN_LR_STEP || (std::isfinite(c.gamma) && c.gamma > 0), KILN_ERROR_INVALID_ARGUMENT,
        "the step schedule's gamma must be > 0, got " + std::to_string(c.gamma));
  check(c.total_steps >= 0, KILN_ERROR_INVALID_ARGUMENT,
        "the cosine schedule's total_steps must be >= 0, got " + std::to_string(c.total_steps));
  check(std::isfinite(c.min_lr) && c.min_lr >= 0, KILN_ERROR_INVALID_ARGUMENT,
        "the cosine schedule's min_lr must be >= 0, got " + std::to_string(c.min_lr));
  check(c.warmup >= 0, KILN_ERROR_INVALID_ARGUMENT, "warmup steps must be >= 0, got " + std::to_string(c.warmup));
}

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
      if (total <= 0)  // not check(): this runs every step and must not build a message
        fail(KILN_ERROR_INVALID_ARGUMENT,
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
