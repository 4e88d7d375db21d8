// StepThreading (backend/cpu/step_threading.hpp), the CPU executable's choice
// between running a step on the pool and on the calling thread alone, driven
// with made-up step times: which way each step runs, when trials start and
// end, and how many steps follow a trial, against the numbers the rules in
// the header give by hand. Linked with kiln_internal.
#include <cstdio>
#include <exception>
#include <functional>
#include <vector>

#include "backend/cpu/step_threading.hpp"
#include "backend_harness.hpp"

using namespace kiln;
using cpu::StepThreading;
using test::g_case;

namespace {

// Runs `steps` steps, each taking time(serial, step index) seconds; returns
// which of them ran serially.
std::vector<bool> run(StepThreading &t, int64_t steps, const std::function<double(bool, int64_t)> &time) {
  std::vector<bool> serial;
  for (int64_t i = 0; i < steps; ++i) {
    const bool alone = t.serial();
    serial.push_back(alone);
    t.record(time(alone, i));
  }
  return serial;
}

// Whether steps [from, to) of a trace all ran the same way, `alone`.
bool all(const std::vector<bool> &trace, int64_t from, int64_t to, bool alone) {
  for (int64_t i = from; i < to; ++i) {
    if (trace[size_t(i)] != alone) return false;
  }
  return true;
}

// Step times in units of 2^-16 s (15.26 us), so that the sums are exact and
// each count below follows from the header's rules by hand: a phase ends
// once its steps reach 655.36 units (10 ms), and counts the steps that start
// at 327.68 or later.
constexpr double kUnit = 1.0 / 65536;

void test_one_thread_never_chooses() {
  g_case = "one thread";
  StepThreading t(1);
  CHECK(!t.timing());
  const auto trace = run(t, 1000, [](bool alone, int64_t) { return alone ? kUnit : 1.0; });
  CHECK(all(trace, 0, 1000, false));
  CHECK(t.settled_steps() == 0);
}

// Pool 6 units, alone 7: 110 pool steps (660 units; from step 56, which
// starts at 330, counted), 94 alone (658; from step 48); the trial took
// 1318 - 204 * 6 = 94 units more than the pool's pace, so ceil(94 / 0.006)
// = 15667 steps follow, on the pool; then the next trial.
void test_pool_faster() {
  g_case = "pool faster";
  StepThreading t(2);
  CHECK(t.timing());
  const int64_t trial = 110 + 94, next = trial + 15667;
  const auto trace = run(t, next + trial + 10, [](bool alone, int64_t) { return (alone ? 7 : 6) * kUnit; });
  CHECK(all(trace, 0, 110, false));
  CHECK(all(trace, 110, trial, true));
  CHECK(t.settled_steps() == 15667);
  CHECK(all(trace, trial, next, false));
  CHECK(all(trace, next, next + 110, false));         // the next trial's pool phase
  CHECK(all(trace, next + 110, next + trial, true));  // and its phase alone
  CHECK(all(trace, next + trial, next + trial + 10, false));
}

// Pool 11 units, alone 7 (a busy process beside the workers): 60 pool
// steps (660), 94 alone (658); 1318 - 154 * 7 = 240 units extra, so
// ceil(240 / 0.007) = 34286 steps follow, alone.
void test_alone_faster() {
  g_case = "alone faster";
  StepThreading t(2);
  const int64_t trial = 60 + 94, next = trial + 34286;
  const auto trace = run(t, next + 70, [](bool alone, int64_t) { return (alone ? 7 : 11) * kUnit; });
  CHECK(all(trace, 0, 60, false));
  CHECK(all(trace, 60, trial, true));
  CHECK(t.settled_steps() == 34286);
  CHECK(all(trace, trial, next, true));
  CHECK(all(trace, next, next + 60, false));  // the next trial starts on the pool
}

// Workers that wake slowly: the pool's first 5 steps take 50 units (250,
// all before the second half), then 3; 136 more reach 658 units. Their
// second half's mean is 3, and the pool beats 4 alone (164 steps, 656
// units), where the mean of all 141 (4.67) would not have. Slow until the
// phase's end instead (14 steps of 50, 700 units), the pool is slow and
// the steps run alone.
void test_pool_waking() {
  g_case = "pool waking";
  StepThreading t(2);
  int64_t pool_steps = 0;
  const auto trace = run(t, 141 + 164 + 100,
                         [&](bool alone, int64_t) { return alone ? 4 * kUnit : (pool_steps++ < 5 ? 50 : 3) * kUnit; });
  CHECK(all(trace, 0, 141, false));
  CHECK(all(trace, 141, 141 + 164, true));
  CHECK(all(trace, 141 + 164, 141 + 164 + 100, false));
  StepThreading slow(2);
  const auto trace2 = run(slow, 14 + 164 + 100, [](bool alone, int64_t) { return (alone ? 4 : 50) * kUnit; });
  CHECK(all(trace2, 0, 14, false));
  CHECK(all(trace2, 14, 14 + 164 + 100, true));
}

// Long steps, 256 units on the pool and 1000 alone (3.9 and 15 ms): steps
// 1 and 2 start before the second half, so 4 on the pool (1024 units), and
// 3 alone (3000; the first one uncounted); 4024 - 7 * 256 = 2232 units
// extra: ceil(2232 / 0.256) = 8719 steps on the pool.
void test_long_steps() {
  g_case = "long steps";
  StepThreading t(2);
  const auto trace = run(t, 7 + 100, [](bool alone, int64_t) { return (alone ? 1000 : 256) * kUnit; });
  CHECK(all(trace, 0, 4, false) && all(trace, 4, 7, true) && all(trace, 7, 107, false));
  CHECK(t.settled_steps() == 8719);
}

// Equal ways cost a trial nothing: the fewest steps follow. A trial of
// huge cost: the most.
void test_clamps() {
  g_case = "settled steps clamped";
  StepThreading even(2);
  run(even, 219 + 219, [](bool, int64_t) { return 3 * kUnit; });
  CHECK(even.settled_steps() == StepThreading::kMinSettledSteps);
  StepThreading far(2);
  run(far, 2000, [](bool alone, int64_t) { return alone ? kUnit : 1e-3; });
  CHECK(far.settled_steps() == StepThreading::kMaxSettledSteps);
  CHECK(far.serial());
}

}  // namespace

int main() {
  try {
    test_one_thread_never_chooses();
    test_pool_faster();
    test_alone_faster();
    test_pool_waking();
    test_long_steps();
    test_clamps();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "cpu_step_threading_test: unexpected exception: %s\n", e.what());
    return 1;
  }
  return test::finish("cpu_step_threading_test");
}
