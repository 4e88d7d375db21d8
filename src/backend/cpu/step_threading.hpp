// Whether each step of one compiled step program runs its kernels on the
// whole thread pool or on the calling thread alone (ThreadPool::SerialScope:
// the same chunks in the same order, so the same bits either way), chosen
// by timing both.
//
// Why timing: a step hands a dozen kernels to the pool's workers, and what
// the hand-offs cost, and the activations that cross to another core, is
// the machine's state, not the step's size. Two threads ran an epoch of the
// tutorial's 784-32-10 in 0.025 s against 0.036 on one, and of
// 784-1024-1024-10 in 1.22 s against 2.45, on this project's idle 2-core
// VM; with one busy process beside them, in 0.060 and 2.82 s, while the
// same steps on the calling thread took 0.036 and 2.45 (2026-11-27). When
// the VM's cores reached each other's caches in 400 ns instead of 90, the
// small model's epoch took 0.054 s on two threads
// (bench/results/cpu-2026-11-27j.md). No fixed threshold tells these apart.
//
// How: a trial runs steps on the pool for kPhaseSeconds, then on the
// caller alone for as long, and compares the mean step of each phase's
// second half: after steps on the caller alone the workers sleep, and while
// another process held their core the steps that woke them took 2 to 15
// times as long as once they ran (a niced process: steady, two threads ran
// an epoch of 784-32-10 in 0.025 s against 0.036 alone). Means, not the
// fastest steps: beside a busy process, the pool's steps were fast while it
// was off the core and slow, mostly, while on. The faster way runs the
// steps that follow: as many as keep the trial's extra time (what its steps
// took beyond the faster way's pace) under kTrialBudget of theirs. Then
// another trial, as the machine's state drifts.
#pragma once

#include <cstdint>

namespace kiln::cpu {

class StepThreading {
 public:
  // Seconds of each phase of a trial, at least; each phase also counts at
  // least kCountedSteps steps in its second half.
  static constexpr double kPhaseSeconds = 0.01;
  static constexpr int64_t kCountedSteps = 2;
  // A trial's extra time, at most, as a share of the steps until the next.
  static constexpr double kTrialBudget = 0.001;
  // Steps between two trials, at least and at most.
  static constexpr int64_t kMinSettledSteps = 64, kMaxSettledSteps = 100000;

  // For a pool of `threads` threads; with one there is nothing to choose:
  // every step runs on the caller and nothing is timed.
  explicit StepThreading(int64_t threads) : choosing_(threads > 1) {}

  // Whether the next step runs on the calling thread alone.
  bool serial() const { return choosing_ && (settled_left_ > 0 ? serial_ : pool_.done()); }
  // Whether record() wants the next step's time.
  bool timing() const { return choosing_; }
  // The next step's wall time, run as serial() said.
  void record(double seconds);

  // Steps after the last trial before the next one (0 before the first).
  int64_t settled_steps() const { return settled_; }

 private:
  // One phase of a trial: its steps, and the mean of those that started in
  // its second half.
  struct Phase {
    double elapsed = 0, counted_sum = 0;
    int64_t steps = 0, counted = 0;
    void add(double seconds);
    bool done() const { return elapsed >= kPhaseSeconds && counted >= kCountedSteps; }
    double mean() const { return counted_sum / double(counted); }
  };
  // Ends a trial: picks the faster way and the steps until the next trial.
  void decide();

  bool choosing_;
  bool serial_ = false;       // the way the last trial chose
  int64_t settled_ = 0;       // steps it chose for
  int64_t settled_left_ = 0;  // of those, still to run (0: in a trial)
  Phase pool_, alone_;        // the current trial's
};

}  // namespace kiln::cpu
