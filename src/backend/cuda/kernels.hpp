// Host-side launchers of kiln's own CUDA kernels (elementwise.cu, reduce.cu,
// nn_kernels.cu, optim.cu, shuffle.cu, steps.cu, narrow_step.cu). Each queues its kernel(s) on
// `L.stream` and checks the launch; the semantics are those of the same-named
// Backend methods. A `step` argument is a device pointer to the StepParams
// block of the step, read by the kernels, never by the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/backend.hpp"

namespace kiln::cuda {

struct NarrowStep;  // planning/narrow_step.hpp

// Where and how wide to launch: grid-stride kernels use at most `max_blocks`
// blocks (enough to fill every SM), so one launch serves any n.
struct Launch {
  cudaStream_t stream = nullptr;
  int64_t max_blocks = 1;
};

// elementwise.cu
void fill(const Launch &L, const FillArgs &args);
void arange(const Launch &L, const ArangeArgs &args);
void cast(const Launch &L, const CastArgs &args);
void unary(const Launch &L, const UnaryArgs &args);
void scalar(const Launch &L, const ScalarArgs &args);
void binary(const Launch &L, const BinaryArgs &args);

// reduce.cu
void reduce(const Launch &L, const ReduceArgs &args);
void softmax(const Launch &L, const SoftmaxArgs &args);

// nn_kernels.cu
void bias_act(const Launch &L, const BiasActArgs &args);
void act_backward(const Launch &L, const ActBackwardArgs &args);
void bias_grad(const Launch &L, const BiasGradArgs &args);
void cross_entropy(const Launch &L, const LossArgs &args);
void mse(const Launch &L, const LossArgs &args);
void bce_with_logits(const Launch &L, const LossArgs &args);
void dropout(const Launch &L, const DropoutArgs &args, const StepParams *step);
void dropout_backward(const Launch &L, const DropoutBackwardArgs &args);
void gather(const Launch &L, const GatherArgs &args, const StepParams *step);

// optim.cu
void clip_grad_norm(const Launch &L, const ClipArgs &args);
void sgd_update(const Launch &L, const SgdArgs &args, const StepParams *step);
void adam_update(const Launch &L, const AdamArgs &args, const StepParams *step);

// shuffle.cu: Backend::shuffle in two parts, so that the caller owns the
// scratch memory (from the device's pool): its size for n, then the sort.
size_t shuffle_scratch_bytes(int64_t n);
void shuffle(const Launch &L, int64_t n, uint64_t seed, int64_t *out, void *scratch, size_t scratch_bytes);

// steps.cu: the step cursor of a CUDA graph (program.hpp). set_cursor writes
// `first` into *cursor; advance_step copies table[*cursor] into *current and
// increments *cursor, on the device, at the start of each captured step.
void set_cursor(const Launch &L, int64_t *cursor, int64_t first);
void advance_step(const Launch &L, const StepParams *table, int64_t *cursor, StepParams *current);

// narrow_step.cu: the five ops of a narrow step (planning/narrow_step.hpp) as
// two kernels; afterwards every buffer they name holds what the ops leave.
void narrow_step(const Launch &L, const NarrowStep &step);

}  // namespace kiln::cuda
