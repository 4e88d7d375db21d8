#include "train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <numeric>

#include "core/ops.hpp"
#include "core/rng.hpp"
#include "nn/loss.hpp"

namespace kiln {

namespace {

// Layout of the trainer's F64 statistics buffer: each region holds the three
// doubles a loss kernel adds into (loss sum, correct count, bad labels).
constexpr int64_t kStatsPass = 0;  // the running epoch or evaluation
constexpr int64_t kStatsStep = 3;  // one kiln_trainer_step
constexpr int64_t kStatsClip = 6;  // clip_grad_norm's scratch double
constexpr int64_t kStatsSize = 7;

// Dropout masks of step t come from rng_bits(seed ^ kDropoutStream, t): a
// stream apart from the shuffle's.
constexpr uint64_t kDropoutStream = 0x64726f706f7574ull;  // "dropout"

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void check_labels_on_host(const Tensor &y, int64_t classes) {
  const int64_t n = y.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t label = y.dtype() == DType::I64   ? y.data_as<int64_t>()[i]
                    : y.dtype() == DType::I32 ? y.data_as<int32_t>()[i]
                                              : y.data_as<uint8_t>()[i];
    if (label < 0 || label >= classes)
      fail(KILN_ERROR_INVALID_ARGUMENT, "label " + std::to_string(label) + " of sample " + std::to_string(i) +
                                            " is outside [0, " + std::to_string(classes) + "): the model has " +
                                            std::to_string(classes) + " outputs");
  }
}

}  // namespace

OptimizerConfig TrainerOptions::resolved_optimizer() const {
  OptimizerConfig c = optimizer;
  if (!weight_decay_set) c.weight_decay = c.kind == KILN_OPTIM_ADAMW ? 0.01 : 0.0;  // torch.optim's defaults
  return c;
}

Trainer::Trainer(std::shared_ptr<Model> model, const TrainerOptions &options)
    : model_(std::move(model)),
      options_(options),
      device_(model_->device()),
      optimizer_(options.resolved_optimizer(), model_->flat()) {
  check_loss_kind(options.loss);
  check(std::isfinite(options.lr) && options.lr >= 0, KILN_ERROR_INVALID_ARGUMENT,
        "lr must be >= 0, got " + std::to_string(options.lr));
  check(options.batch_size >= 1, KILN_ERROR_INVALID_ARGUMENT,
        "batch size must be >= 1, got " + std::to_string(options.batch_size));
  check(std::isfinite(options.grad_clip) && options.grad_clip >= 0, KILN_ERROR_INVALID_ARGUMENT,
        "the gradient clipping norm must be >= 0 (0 = off), got " + std::to_string(options.grad_clip));
  check(options.progress_interval >= 0, KILN_ERROR_INVALID_ARGUMENT,
        "the progress interval must be >= 0, got " + std::to_string(options.progress_interval));
  check_schedule_config(options.schedule);
  const Tensor &params = model_->flat();
  grads_ = Tensor::full(params.context(), params.shape(), params.dtype(), device_, 0.0);
  stats_ = Tensor::full(params.context(), Shape{kStatsSize}, DType::F64, device_, 0.0);
  rng_seed_ = options.shuffle_seed_set ? options.shuffle_seed : model_->context()->derive_seed();
}

// The checks on the step path are `if (!ok) fail(...)`: check() would build
// its message on every step, and a step must not allocate.
void Trainer::check_model_device() const {
  if (model_->device() != device_)
    fail(KILN_ERROR_INVALID_ARGUMENT, "model moved to " + model_->device().str() + " after the trainer was created on " +
                                          device_.str() + "; create a new trainer");
}

void Trainer::check_dataset(const Dataset &ds, const char *what) const {
  const int64_t in = model_->input_size(), out = model_->output_size();
  check(ds.num_features() == in, KILN_ERROR_SHAPE_MISMATCH,
        std::string(what) + " has " + std::to_string(ds.num_features()) + " features per sample but the model takes " +
            std::to_string(in));
  if (options_.loss == KILN_LOSS_CROSS_ENTROPY) {
    check(ds.has_class_labels(), KILN_ERROR_INVALID_ARGUMENT,
          std::string(what) + " has float targets but the cross-entropy loss needs class labels");
    check(ds.num_classes() <= out, KILN_ERROR_INVALID_ARGUMENT,
          std::string(what) + " has labels up to " + std::to_string(ds.num_classes() - 1) + " but the model has " +
              std::to_string(out) + " outputs (labels must be in [0, " + std::to_string(out) + "))");
  } else {
    check(!ds.has_class_labels(), KILN_ERROR_INVALID_ARGUMENT,
          std::string(what) + " has class labels but the " + loss_name(options_.loss) + " loss needs float targets");
    check(ds.target_width() == out, KILN_ERROR_SHAPE_MISMATCH,
          std::string(what) + " has targets of width " + std::to_string(ds.target_width()) + " but the model has " +
              std::to_string(out) + " outputs");
  }
}

void Trainer::ensure_capacity(int64_t rows) {
  if (rows <= capacity_) return;
  const std::shared_ptr<Context> &ctx = model_->context();
  const DType t = model_->dtype();
  Workspace ws = model_->make_workspace(rows);
  Tensor x = Tensor::empty(ctx, Shape{rows, model_->input_size()}, t, device_);
  Tensor y = options_.loss == KILN_LOSS_CROSS_ENTROPY
                 ? Tensor::empty(ctx, Shape{rows}, DType::I64, device_)
                 : Tensor::empty(ctx, Shape{rows, model_->output_size()}, t, device_);
  ws_ = std::move(ws);
  batch_x_ = x;
  batch_y_ = y;
  capacity_ = rows;
}

void Trainer::ensure_order(int64_t n) {
  if (int64_t(order_.size()) >= n) return;
  Tensor device_order = Tensor::empty(model_->context(), Shape{n}, DType::I64, device_);
  order_.resize(size_t(n));
  order_device_ = device_order;
}

const void *Trainer::stage(const Tensor &src, const Tensor &buf, int64_t rows) {
  if (src.device() == device_ && src.dtype() == buf.dtype()) return src.data();
  const int64_t n = src.numel();
  Tensor dst = buf.rows(0, rows);
  if (src.device() == device_) {
    src.backend().cast(device_.index, src.dtype(), src.data(), dst.dtype(), dst.data(), n);
  } else if (src.dtype() == buf.dtype()) {
    dst.copy_from(src.reshape(dst.shape()));
  } else {
    const Tensor moved = src.to(device_);  // a conversion across devices: the one copy that allocates
    moved.backend().cast(device_.index, moved.dtype(), moved.data(), dst.dtype(), dst.data(), n);
  }
  return dst.data();
}

void Trainer::run_batch(const void *x, const void *y, int64_t rows, bool training, double *stats, bool update) {
  const Model &m = *model_;
  Backend &b = m.flat().backend();
  const DType t = m.dtype();
  const uint64_t dropout_seed = rng_bits(rng_seed_ ^ kDropoutStream, uint64_t(steps_done_));
  const void *logits = m.forward_train(ws_, x, rows, training, dropout_seed);
  loss_kernel(b, device_.index, t, options_.loss, rows, m.output_size(), logits, y,
              update ? ws_.grad.back().data() : nullptr, stats);
  if (!update) return;
  m.backward(ws_, rows, training, grads_.data());
  if (options_.grad_clip > 0)
    b.clip_grad_norm(device_.index, t, grads_.numel(), grads_.data(), options_.grad_clip,
                     stats_.data_as<double>() + kStatsClip);
  optimizer_.step(m.flat(), grads_, current_lr());
  ++steps_done_;
}

double Trainer::step(const Tensor &x, const Tensor &y, bool want_loss) {
  check_model_device();
  const int64_t in = model_->input_size(), out = model_->output_size();
  if (!dtype_is_float(x.dtype()) && x.dtype() != DType::U8)
    fail(KILN_ERROR_DTYPE_MISMATCH, std::string("x must be a float or u8 tensor, got ") + dtype_name(x.dtype()));
  if (x.ndim() < 2 || x.dim(0) < 1 || x.numel() != x.dim(0) * in)
    fail(KILN_ERROR_SHAPE_MISMATCH,
         "x has shape " + x.shape().str() + " but the model takes [batch >= 1, " + std::to_string(in) + "]");
  const int64_t rows = x.dim(0);
  check_target(options_.loss, rows, out, y);
  if (options_.loss == KILN_LOSS_CROSS_ENTROPY && y.device().is_cpu()) check_labels_on_host(y, out);
  ensure_capacity(rows);

  const void *xd = stage(x, batch_x_, rows);
  const void *yd = stage(y, batch_y_, rows);
  Backend &b = stats_.backend();
  double *stats = stats_.data_as<double>() + kStatsStep;
  b.fill(device_.index, DType::F64, 3, stats, 0.0);
  run_batch(xd, yd, rows, model_->training(), stats, true);
  if (!want_loss) return 0;
  double host[3];
  read_stats(kStatsStep, host);
  if (host[2] != 0)
    fail(KILN_ERROR_INVALID_ARGUMENT, "labels outside [0, " + std::to_string(out) + ") in the batch (the model has " +
                                          std::to_string(out) +
                                          " outputs); the update was applied with them counted as loss 0");
  return host[0] / loss_count(options_.loss, rows, out);
}

void Trainer::read_stats(int64_t offset, double out[3]) const {
  stats_.rows(offset, offset + 3).copy_to_host(out, 3 * sizeof(double));
}

uint64_t Trainer::next_below(uint64_t n) {
  // Lemire's multiply-shift: the high word of a 64x64 product, uniform
  // enough for n far below 2^64 and the same on every platform.
  return uint64_t((unsigned __int128)rng_bits(rng_seed_, rng_counter_++) * n >> 64);
}

kiln_epoch_stats Trainer::run_epoch(const Dataset &ds, int64_t epoch_index, int64_t epochs, kiln_progress_fn callback,
                                    void *user) {
  check_model_device();
  check_dataset(ds, "the training dataset");
  const int64_t n = ds.size();
  const int64_t batch = std::min(options_.batch_size, n);
  const int64_t batches = (n + batch - 1) / batch;
  ensure_capacity(batch);
  ensure_order(n);
  std::iota(order_.begin(), order_.begin() + n, int64_t(0));
  for (int64_t i = n - 1; i > 0; --i) std::swap(order_[size_t(i)], order_[size_t(next_below(uint64_t(i) + 1))]);
  order_device_.rows(0, n).copy_from_host(order_.data(), n * int64_t(sizeof(int64_t)));

  Backend &b = stats_.backend();
  double *stats = stats_.data_as<double>() + kStatsPass;
  b.fill(device_.index, DType::F64, 3, stats, 0.0);
  const bool training = model_->training();
  const int64_t interval = callback ? options_.progress_interval : 0;
  const Clock::time_point start = Clock::now();
  for (int64_t i = 0; i < batches; ++i) {
    const int64_t first = i * batch, count = std::min(batch, n - first);
    ds.gather(order_device_.rows(first, n), count, batch_x_, batch_y_);
    run_batch(batch_x_.data(), batch_y_.data(), count, training, stats, true);
    if (interval > 0 && (i + 1) % interval == 0 && i + 1 < batches) {
      double host[3];
      read_stats(kStatsPass, host);
      const double elapsed = seconds_since(start);
      const int64_t done = first + count;
      kiln_progress p{};
      p.struct_size = sizeof p;
      p.phase = KILN_PROGRESS_BATCH;
      p.epoch = epoch_index;
      p.epochs = epochs;
      p.batch = i + 1;
      p.batches = batches;
      p.loss = host[0] / loss_count(options_.loss, done, model_->output_size());
      p.samples_per_second = elapsed > 0 ? double(done) / elapsed : 0;
      p.elapsed_seconds = elapsed;
      if (callback(user, &p) != 0)
        fail(KILN_ERROR_CANCELLED, "training cancelled by the progress callback in epoch " +
                                       std::to_string(epoch_index) + " after batch " + std::to_string(i + 1) + " of " +
                                       std::to_string(batches));
    }
  }
  double host[3];
  read_stats(kStatsPass, host);
  const double seconds = seconds_since(start);
  const int64_t out = model_->output_size();
  check(host[2] == 0, KILN_ERROR_INVALID_ARGUMENT,
        std::to_string(int64_t(host[2])) + " labels of the epoch are outside [0, " + std::to_string(out) +
            "): the model has " + std::to_string(out) + " outputs");
  ++epochs_done_;
  kiln_epoch_stats s{};
  s.struct_size = sizeof s;
  s.epoch = epochs_done_;
  s.train_loss = host[0] / loss_count(options_.loss, n, out);
  s.train_accuracy = options_.loss == KILN_LOSS_CROSS_ENTROPY ? host[1] / double(n) : 0;
  s.seconds = seconds;
  s.samples_per_second = seconds > 0 ? double(n) / seconds : 0;
  s.lr = current_lr();
  return s;
}

kiln_epoch_stats Trainer::epoch(const Dataset &dataset) { return run_epoch(dataset, epochs_done_ + 1, 1, nullptr, nullptr); }

void Trainer::evaluate(const Dataset &ds, double *loss, double *accuracy) {
  check_model_device();
  check_dataset(ds, "the evaluation dataset");
  const int64_t n = ds.size();
  const int64_t batch = std::min(options_.batch_size, n);
  ensure_capacity(batch);
  ensure_order(n);
  std::iota(order_.begin(), order_.begin() + n, int64_t(0));
  order_device_.rows(0, n).copy_from_host(order_.data(), n * int64_t(sizeof(int64_t)));
  double *stats = stats_.data_as<double>() + kStatsPass;
  stats_.backend().fill(device_.index, DType::F64, 3, stats, 0.0);
  for (int64_t first = 0; first < n; first += batch) {
    const int64_t count = std::min(batch, n - first);
    ds.gather(order_device_.rows(first, n), count, batch_x_, batch_y_);
    run_batch(batch_x_.data(), batch_y_.data(), count, false, stats, false);
  }
  double host[3];
  read_stats(kStatsPass, host);
  const int64_t out = model_->output_size();
  check(host[2] == 0, KILN_ERROR_INVALID_ARGUMENT,
        std::to_string(int64_t(host[2])) + " labels of the dataset are outside [0, " + std::to_string(out) + ")");
  *loss = host[0] / loss_count(options_.loss, n, out);
  *accuracy = options_.loss == KILN_LOSS_CROSS_ENTROPY ? host[1] / double(n) : 0;
}

std::shared_ptr<History> Trainer::fit(const Dataset &train, const Dataset *validation, int64_t epochs,
                                      kiln_progress_fn callback, void *user) {
  check(epochs >= 1, KILN_ERROR_INVALID_ARGUMENT, "epochs must be >= 1, got " + std::to_string(epochs));
  check_model_device();
  check_dataset(train, "the training dataset");
  if (validation) check_dataset(*validation, "the validation dataset");
  const int64_t batch = std::min(options_.batch_size, train.size());
  const int64_t batches = (train.size() + batch - 1) / batch;

  // The cosine schedule without total_steps spans this fit; the end is
  // forgotten however fit leaves.
  struct FitEnd {
    int64_t &end;
    ~FitEnd() { end = 0; }
  } fit_end{fit_end_};
  fit_end_ = steps_done_ + epochs * batches;

  auto history = std::make_shared<History>();
  history->epochs.reserve(size_t(epochs));
  for (int64_t e = 1; e <= epochs; ++e) {
    model_->set_training(true);
    kiln_epoch_stats s = run_epoch(train, e, epochs, callback, user);
    if (validation) {
      evaluate(*validation, &s.val_loss, &s.val_accuracy);
      s.has_validation = 1;
    }
    history->epochs.push_back(s);
    if (callback) {
      kiln_progress p{};
      p.struct_size = sizeof p;
      p.phase = KILN_PROGRESS_EPOCH;
      p.epoch = e;
      p.epochs = epochs;
      p.batch = batches;
      p.batches = batches;
      p.loss = s.train_loss;
      p.samples_per_second = s.samples_per_second;
      p.elapsed_seconds = s.seconds;
      p.stats = &history->epochs.back();
      if (callback(user, &p) != 0)
        fail(KILN_ERROR_CANCELLED, "training cancelled by the progress callback after epoch " + std::to_string(e) +
                                       " of " + std::to_string(epochs));
    }
  }
  return history;
}

double Trainer::current_lr() const {
  return scheduled_lr(options_.schedule, options_.lr, steps_done_, fit_end_);
}

}  // namespace kiln
