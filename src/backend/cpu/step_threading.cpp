// See step_threading.hpp.
#include "backend/cpu/step_threading.hpp"

#include <algorithm>
#include <cmath>

namespace kiln::cpu {

void StepThreading::Phase::add(double seconds) {
  if (elapsed >= kPhaseSeconds / 2) {  // this step started in the second half
    counted_sum += seconds;
    ++counted;
  }
  elapsed += seconds;
  ++steps;
}

void StepThreading::record(double seconds) {
  if (!choosing_) return;
  if (settled_left_ > 0) {
    if (--settled_left_ == 0) pool_ = alone_ = Phase();  // the next step starts a trial
    return;
  }
  Phase &phase = pool_.done() ? alone_ : pool_;
  phase.add(seconds);
  if (alone_.done()) decide();
}

void StepThreading::decide() {
  const double pool = pool_.mean(), alone = alone_.mean();
  serial_ = alone < pool;
  // The trial's extra time: what its steps took beyond the faster way's
  // pace, to be spread over enough steps that it stays within the budget.
  const double best = std::min(pool, alone);
  const double extra = std::max(0.0, pool_.elapsed + alone_.elapsed - double(pool_.steps + alone_.steps) * best);
  const double steps = best > 0 ? extra / (kTrialBudget * best) : double(kMaxSettledSteps);
  settled_ = std::clamp<int64_t>(int64_t(std::ceil(std::min(steps, double(kMaxSettledSteps)))), kMinSettledSteps,
                                 kMaxSettledSteps);
  settled_left_ = settled_;
}

}  // namespace kiln::cpu
