// Whether a training step is the narrow one-hidden-layer MLP that two of
// kiln's own kernels run whole (narrow_step.cu): plain C++ over core's step
// ops, without CUDA, so the CPU tests run it (tests/cuda_planning_test.cpp).
//
// Why: the tutorial's 784-32-10 at batch 128 is launch-bound on a GPU. Its
// step through cuBLASLt is a dozen kernels of a few microseconds each (an
// H200, 2026-11-27: 15 launches and 45 us per step inside a CUDA graph),
// while its arithmetic is 20 MFLOP. The two kernels do the forward, the loss
// and the backward of the whole batch; the gather before them and the
// optimizer after them stay the step's own ops.
//
// The step must be exactly, with nothing between:
//   linear (in -> hidden, ReLU or identity), linear (hidden -> classes),
//   cross-entropy loss with its gradient, the second linear's backward (with
//   dx), the first linear's backward (without dx: the first trained layer);
// f32 throughout with exact products (not TF32: the kernels' FMAs would
// not round as the plain kernels' tensor cores do), no kept pre-activation,
// hidden <= kNarrowMaxHidden, classes <= kNarrowMaxClasses, and no other
// Linear op in the program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/program.hpp"

namespace kiln::cuda {

constexpr int64_t kNarrowMaxHidden = 64;   // a block's shared memory holds a tile of rows x hidden
constexpr int64_t kNarrowMaxClasses = 32;  // one warp holds a row of logits, a lane per class

// The five ops' buffers, as the kernels read and write them. After a step
// they hold what the five ops would have left there (dh: the gradient w.r.t.
// the hidden pre-activation, as the first backward leaves its dy in place).
struct NarrowStep {
  size_t first = 0, last = 0;  // ops[first..last] are the five ops
  int64_t rows = 0, in = 0, hidden = 0, classes = 0;
  const float *x = nullptr, *w1 = nullptr, *b1 = nullptr;  // b1, b2, db1, db2 may be null
  float *h = nullptr;
  UnaryOp act = UnaryOp::Relu;
  double alpha = 0, threshold = 0;
  const float *w2 = nullptr, *b2 = nullptr;
  float *logits = nullptr;
  const int64_t *labels = nullptr;
  double grad_scale = 1, smoothing = 0;
  float *dlogits = nullptr;
  double *stats = nullptr;
  float *dh = nullptr;
  float *dw1 = nullptr, *db1 = nullptr, *dw2 = nullptr, *db2 = nullptr;
};

// The narrow step of `ops`, when fast_path has kFastNarrow and the ops are
// one; nothing otherwise.
std::optional<NarrowStep> find_narrow_step(const std::vector<StepOp> &ops, uint32_t fast_path);

}  // namespace kiln::cuda
