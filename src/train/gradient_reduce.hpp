// What turns the gradients a step's backward writes into those its optimizer
// reads: in mixed precision the cast of the bf16 gradients to the f32 master
// ones, and in data parallel training their mean over the ranks, in buckets.
//
// Why buckets: Model::append_backward runs the layers from the last to the
// first, and the flat gradient buffer holds them from the first to the last,
// so after each layer the gradients written so far are one contiguous tail
// of the buffer. Once that tail holds `bucket_bytes` not yet reduced, its
// allreduce can start while the layers below are still being differentiated:
// on GPUs NCCL then runs beside the backward (PyTorch DDP's gradient buckets,
// bucket_cap_mb), and only the last bucket's allreduce is left after it.
// bucket_bytes 0 is one allreduce over the whole buffer after the backward.
#pragma once

#include <cstdint>
#include <vector>

#include "core/collective.hpp"
#include "core/program.hpp"

namespace kiln {

struct GradientBuffers {
  DType t = DType::F32;  // the master gradients' dtype (the model's)
  void *grads = nullptr;  // [n] master gradients, in the model's flat parameter layout
  int64_t n = 0;
  DType work = DType::F32;     // what the backward writes: t, or BF16 in mixed precision
  void *work_grads = nullptr;  // where the backward writes: grads, or its low-precision twin
};

// Rewrites ops[backward_begin..] (the ops Model::append_backward just
// appended, whose LinearBackwardOps write work_grads) so that the gradients
// are finished when the last op has run: each bucket's cast (mixed
// precision) and, with comm, its AllReduceStartOp right after the backward
// op that completes it, then one AllReduceWaitOp. Without comm only the cast
// is appended, once, after the backward. Where the backward's gradients do
// not form one growing tail of the buffer (never, for Model's layouts) the
// whole buffer is one bucket. Returns the number of buckets (0: no comm).
int64_t finish_gradients(std::vector<StepOp> &ops, size_t backward_begin, const GradientBuffers &g, Collective *comm,
                         int64_t bucket_bytes);

}  // namespace kiln
