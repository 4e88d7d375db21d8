// Host-side launchers of kiln's own CUDA kernels (elementwise.cu, reduce.cu,
// nn_kernels.cu, optim.cu, shuffle.cu, steps.cu). Each queues its kernel(s) on
// `L.stream` and checks the launch; the semantics are those of the same-named
// Backend methods. A `step` argument is a device pointer to the StepParams
// block of the step, read by the kernels, never by the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/backend.hpp"

namespace kiln::cuda {

// Where and how wide to launch: grid-stride kernels use at most `max_blocks`
// blocks (enough to fill every SM), so one launch serves any n.
struct Launch {
  cudaStream_t stream = nullptr;
  int64_t max_blocks = 1;
};

// elementwise.cu
void fill(const Launch &L, DType t, int64_t n, void *out, double value);
void arange(const Launch &L, DType t, int64_t n, void *out, double start, double step);
void cast(const Launch &L, DType from, const void *in, DType to, void *out, int64_t n);
void unary(const Launch &L, UnaryOp op, DType t, int64_t n, const void *in, void *out, double alpha);
void scalar(const Launch &L, BinaryOp op, DType t, int64_t n, const void *a, double s, void *out);
void binary(const Launch &L, BinaryOp op, DType t, const Broadcast &bc, const void *a, const void *b, void *out);

// reduce.cu
void reduce(const Launch &L, ReduceOp op, DType t, int64_t outer, int64_t n, int64_t inner, const void *in, void *out);
void softmax(const Launch &L, DType t, int64_t outer, int64_t n, int64_t inner, const void *in, void *out, bool log);

// nn_kernels.cu
void bias_act(const Launch &L, DType t, int64_t rows, int64_t cols, void *y, const void *bias, UnaryOp act,
              double alpha, void *pre);
void act_backward(const Launch &L, DType t, int64_t n, UnaryOp act, double alpha, const void *dy, const void *pre,
                  const void *y, void *dx);
void bias_grad(const Launch &L, DType t, int64_t rows, int64_t cols, const void *dy, void *db, double beta);
void cross_entropy(const Launch &L, DType t, int64_t rows, int64_t cols, const void *logits, const int64_t *labels,
                   double grad_scale, void *dlogits, double *stats);
void mse(const Launch &L, DType t, int64_t n, const void *pred, const void *target, double grad_scale, void *dpred,
         double *stats);
void bce_with_logits(const Launch &L, DType t, int64_t n, const void *logits, const void *target, double grad_scale,
                     void *dlogits, double *stats);
void dropout(const Launch &L, const DropoutArgs &args, const StepParams *step);
void dropout_backward(const Launch &L, DType t, int64_t n, const void *dy, const uint8_t *mask, double p, void *dx);
void gather(const Launch &L, const GatherArgs &args, const StepParams *step);

// optim.cu
void clip_grad_norm(const Launch &L, DType t, int64_t n, void *grads, double max_norm, double *scratch);
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

}  // namespace kiln::cuda
