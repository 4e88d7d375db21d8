// Losses with mean reduction as PyTorch: cross-entropy from logits with
// integer labels (mean over rows), MSE and BCE-with-logits (mean over all
// elements). Each is one backend kernel that adds the summed loss (and, for
// cross-entropy, the count of correct argmaxes) into device-side stats and
// can write the gradient of the mean loss w.r.t. the predictions in the same
// pass, so the trainer never waits for the device during a step.
#pragma once

#include "core/program.hpp"
#include "core/tensor.hpp"

namespace kiln {

const char *loss_name(kiln_loss_kind kind);
void check_loss_kind(kiln_loss_kind kind);

// The divisor of the mean: rows for cross-entropy, rows * cols otherwise.
inline double loss_count(kiln_loss_kind kind, int64_t rows, int64_t cols) {
  return kind == KILN_LOSS_CROSS_ENTROPY ? double(rows) : double(rows) * double(cols);
}

// Checks target against predictions [rows, cols] for kind: cross-entropy
// takes integer labels [rows] (i32, i64, u8), the others float targets
// [rows, cols] (or [rows] when cols == 1). SHAPE_MISMATCH / DTYPE_MISMATCH
// naming both.
void check_target(kiln_loss_kind kind, int64_t rows, int64_t cols, const Tensor &target);

// The loss op of pred [rows, cols] of dtype t against target (I64 labels for
// cross-entropy, else dtype t): stats[0] += summed loss, stats[1] += correct
// (cross-entropy), stats[2] += labels out of range (CUDA only; the CPU
// throws). dpred (may be null) gets d mean loss / d pred. label_smoothing:
// cross-entropy's (LossArgs; 0 for the other kinds).
LossOp loss_op(kiln_loss_kind kind, DType t, int64_t rows, int64_t cols, const void *pred, const void *target,
               void *dpred, double *stats, double label_smoothing);

// kiln_loss: the mean loss of pred against target (converted as needed), on
// pred's device.
double compute_loss(kiln_loss_kind kind, const Tensor &pred, const Tensor &target);

}  // namespace kiln
