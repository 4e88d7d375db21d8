// The buffers a trainer's steps run on and the programs over them (see
// trainer.hpp): allocated once per batch capacity or dataset size, named for
// the step builder, and the compiled programs looked up by their key.
#include <algorithm>
#include <memory>

#include "train/trainer.hpp"

namespace kiln {

void Trainer::ensure_capacity(int64_t rows) {
  if (rows <= capacity_) return;
  const std::shared_ptr<Context> &ctx = model_->context();
  const int64_t out = model_->output_size();
  // Zeroed like the model's workspace (Model::make_workspace): a program's
  // compile may save them before a step has written them.
  Workspace ws = model_->make_workspace(rows, config_.work);
  auto zeros = [&](Shape shape, DType type) { return Tensor::full(ctx, shape, type, device_, 0.0); };
  Tensor x = zeros(Shape{rows, model_->input_size()}, config_.work);
  Tensor y = options_.loss == KILN_LOSS_CROSS_ENTROPY ? zeros(Shape{rows}, DType::I64)
                                                      : zeros(Shape{rows, out}, model_->dtype());
  Tensor logits32, dlogits32;
  if (config_.work != model_->dtype()) {
    logits32 = zeros(Shape{rows, out}, model_->dtype());
    dlogits32 = zeros(Shape{rows, out}, model_->dtype());
  }
  ws_ = std::move(ws);
  batch_x_ = x;
  batch_y_ = y;
  logits32_ = logits32;
  dlogits32_ = dlogits32;
  capacity_ = rows;
  buffers_changed();
}

void Trainer::ensure_order(int64_t n) {
  const std::shared_ptr<Context> &ctx = model_->context();
  if (!order_device_.defined() || order_device_.numel() < n) {
    Tensor order = Tensor::empty(ctx, Shape{n}, DType::I64, device_);
    Tensor rows = Tensor::empty(ctx, Shape{n}, DType::I64, device_);
    order_device_ = order;
    rows_device_ = rows;
    buffers_changed();
  }
  const int64_t entries = std::max(n, kStepWindow);
  if (table_entries_ < entries) {
    Tensor table = Tensor::empty(ctx, Shape{entries * int64_t(sizeof(StepParams))}, DType::U8, device_);
    table_ = table;
    table_entries_ = entries;
    table_host_.resize(size_t(entries));
    window_valid_ = false;
    buffers_changed();
  }
}

void Trainer::buffers_changed() {
  StepBuffers &b = step_buffers_;
  ++b.generation;
  b.ws = &ws_;
  b.batch_x = batch_x_.defined() ? batch_x_.data() : nullptr;
  b.batch_y = batch_y_.defined() ? batch_y_.data() : nullptr;
  b.batch_y_type = batch_y_.defined() ? batch_y_.dtype() : DType::I64;
  b.logits32 = logits32_.defined() ? logits32_.data() : nullptr;
  b.dlogits32 = dlogits32_.defined() ? dlogits32_.data() : nullptr;
  b.grads = grads_.data();
  b.lp_params = lp_params_.defined() ? lp_params_.data() : nullptr;
  b.lp_grads = lp_grads_.defined() ? lp_grads_.data() : nullptr;
  b.stats = stats_.data();
  b.table = table_.defined() ? static_cast<const StepParams *>(table_.data()) : nullptr;
  b.table_size = table_entries_;
  b.rows = rows_device_.defined() ? rows_device_.data_as<int64_t>() : nullptr;
  programs_.clear();  // they name the old buffers, and the generation makes them unreachable anyway
}

void Trainer::stage(const Tensor &src, const Tensor &buf, int64_t rows) {
  const int64_t n = src.numel();
  Tensor dst = buf.rows(0, rows);
  if (src.device() == device_) {
    if (src.dtype() == dst.dtype()) dst.copy_from(src.reshape(dst.shape()));
    else src.backend().cast(device_.index, CastArgs{src.dtype(), dst.dtype(), n, src.data(), dst.data()});
  } else if (src.dtype() == buf.dtype()) {
    dst.copy_from(src.reshape(dst.shape()));
  } else {
    const Tensor moved = src.to(device_);  // a conversion across devices: the one copy that allocates
    moved.backend().cast(device_.index, CastArgs{moved.dtype(), dst.dtype(), n, moved.data(), dst.data()});
  }
}

Executable &Trainer::program(bool trains, bool training, int64_t rows, const SourceView *source) {
  StepBuild b;
  b.model = model_.get();
  b.optimizer = &optimizer_;
  b.config = &config_;
  b.buffers = &step_buffers_;
  b.comm = comm_.get();
  b.trains = trains, b.training = training;
  b.rows = rows;
  b.source = source;
  return programs_.get(step_key(b), [&] {
    const StepProgram p = build_step_program(b);
    std::unique_ptr<Executable> exe = model_->flat().backend().compile(device_.index, p);
    model_->context()->log(KILN_LOG_DEBUG, "compiled " + p.label + ": " + exe->describe());
    return exe;
  });
}

}  // namespace kiln
