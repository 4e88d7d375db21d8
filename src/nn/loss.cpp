#include "nn/loss.hpp"

#include <string>

#include "core/ops.hpp"

namespace kiln {

const char *loss_name(kiln_loss_kind kind) {
  switch (kind) {
    case KILN_LOSS_CROSS_ENTROPY: return "cross-entropy";
    case KILN_LOSS_MSE: return "MSE";
    case KILN_LOSS_BCE_WITH_LOGITS: return "BCE-with-logits";
  }
  return "?";
}

void check_loss_kind(kiln_loss_kind kind) {
  check(kind >= KILN_LOSS_CROSS_ENTROPY && kind <= KILN_LOSS_BCE_WITH_LOGITS, KILN_ERROR_INVALID_ARGUMENT,
        "unknown loss kind " + std::to_string(int(kind)));
}

// On every training step: KILN_CHECK formats nothing when the target fits.
void check_target(kiln_loss_kind kind, int64_t rows, int64_t cols, const Tensor &target) {
  if (kind == KILN_LOSS_CROSS_ENTROPY) {
    KILN_CHECK(target.dtype() == DType::I64 || target.dtype() == DType::I32 || target.dtype() == DType::U8,
               KILN_ERROR_DTYPE_MISMATCH,
               std::string("cross-entropy takes integer class labels (i32, i64 or u8), got ") +
                   dtype_name(target.dtype()));
    KILN_CHECK(target.ndim() == 1 && target.dim(0) == rows, KILN_ERROR_SHAPE_MISMATCH,
               "cross-entropy labels must have shape [" + std::to_string(rows) + "] for logits " +
                   Shape{rows, cols}.str() + ", got " + target.shape().str());
    return;
  }
  KILN_CHECK(dtype_is_float(target.dtype()), KILN_ERROR_DTYPE_MISMATCH,
             std::string(loss_name(kind)) + " takes float targets, got " + dtype_name(target.dtype()));
  KILN_CHECK(target.shape() == (Shape{rows, cols}) || (cols == 1 && target.shape() == Shape{rows}),
             KILN_ERROR_SHAPE_MISMATCH,
             std::string(loss_name(kind)) + " targets must have the predictions' shape " + Shape{rows, cols}.str() +
                 ", got " + target.shape().str());
}

LossOp loss_op(kiln_loss_kind kind, DType t, int64_t rows, int64_t cols, const void *pred, const void *target,
               void *dpred, double *stats, double label_smoothing) {
  LossOp op;
  op.kind = kind;
  op.args.t = t;
  op.args.rows = rows, op.args.cols = cols;
  op.args.grad_scale = 1.0 / loss_count(kind, rows, cols);
  op.args.pred = pred, op.args.target = target, op.args.dpred = dpred, op.args.stats = stats;
  op.args.label_smoothing = label_smoothing;
  return op;
}

double compute_loss(kiln_loss_kind kind, const Tensor &pred, const Tensor &target) {
  check_loss_kind(kind);
  check_same_device(pred, target);
  check_float(pred.dtype(), loss_name(kind));
  check(pred.ndim() == 2, KILN_ERROR_SHAPE_MISMATCH,
        std::string(loss_name(kind)) + " predictions must be [batch, outputs], got " + pred.shape().str());
  const int64_t rows = pred.dim(0), cols = pred.dim(1);
  check_target(kind, rows, cols, target);
  check(rows > 0 && cols > 0, KILN_ERROR_SHAPE_MISMATCH,
        std::string(loss_name(kind)) + " of an empty batch " + pred.shape().str() + " is undefined");
  const DType want = kind == KILN_LOSS_CROSS_ENTROPY ? DType::I64 : pred.dtype();
  const Tensor converted = target.dtype() == want ? target : cast(target, want);
  Tensor stats = Tensor::full(pred.context(), Shape{3}, DType::F64, pred.device(), 0.0);
  run_op(pred.backend(), pred.device().index,
         loss_op(kind, pred.dtype(), rows, cols, pred.data(), converted.data(), nullptr, stats.data_as<double>(), 0),
         nullptr);
  double host[3];
  stats.copy_to_host(host, sizeof host);
  check(host[2] == 0, KILN_ERROR_INVALID_ARGUMENT,
        std::to_string(int64_t(host[2])) + " labels are outside [0, " + std::to_string(cols) + ") for " +
            std::to_string(cols) + " classes");
  return host[0] / loss_count(kind, rows, cols);
}

}  // namespace kiln
