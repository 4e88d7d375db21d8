// What timing a Linear op changes, and how it is undone: plain C++ without
// CUDA, in kiln_internal, so the CPU tests run it on host memory
// (tests/cuda_planning_test.cpp). CudaExecutable (program.cpp) times each
// Linear op of a step program as cuDNN against the path it would replace,
// when it compiles the program, on the program's own buffers.
//
// Those buffers may hold live data then: a trainer stages its batch before it
// compiles the program that reads it, and a program compiled in the middle of
// a gradient accumulation finds partial sums in the gradients. On the H100
// (2026-11-26) every first kiln_trainer_step with cuDNN on trained on the
// timing's filler bytes instead of its batch. So a TimingGuard saves every
// buffer the timing writes or fills, fills the inputs a step would write
// before the op reads them with defined bytes (no uninitialised reads for
// initcheck, no NaN or denormal patterns to skew the times), and puts the
// saved contents back when the timing ends, also when it throws. Weights and
// biases are only read: they are not copied.
#pragma once

#include <cstdint>
#include <vector>

#include "core/program.hpp"

namespace kiln::cuda {

struct TimedBuffer {
  void *data = nullptr;
  int64_t bytes = 0;
  bool fill = false;  // read by the op before a step would write it
};

// Every buffer of `op` the timing writes or fills, each pointer once (with
// the largest extent and `fill` if any use fills it); null ones left out.
std::vector<TimedBuffer> timed_buffers(const LinearOp &op);
std::vector<TimedBuffer> timed_buffers(const LinearBackwardOp &op);

// The memory operations a guard needs: the device's, in its stream's order,
// in program.cpp; the host's in the test.
class TimingMemory {
 public:
  virtual ~TimingMemory() = default;
  virtual void *alloc(int64_t bytes) = 0;
  virtual void release(void *p) noexcept = 0;
  virtual void copy(void *dst, const void *src, int64_t bytes) = 0;
  virtual void fill(void *p, int64_t bytes) = 0;
};

class TimingGuard {
 public:
  // Saves every buffer, then fills those marked `fill`. Throws what the
  // memory throws, with nothing changed and nothing kept.
  TimingGuard(TimingMemory &memory, std::vector<TimedBuffer> buffers);
  TimingGuard(const TimingGuard &) = delete;
  TimingGuard &operator=(const TimingGuard &) = delete;
  // Puts back what restore() has not (errors ignored: an exception is
  // already on its way) and frees the copies.
  ~TimingGuard();
  // Puts every buffer back and frees the copies; errors propagate.
  void restore();

 private:
  void put_back();
  void release_copies() noexcept;

  TimingMemory &memory_;
  std::vector<TimedBuffer> buffers_;
  std::vector<void *> copies_;  // one per buffer, in order
  bool restored_ = false;
};

}  // namespace kiln::cuda
