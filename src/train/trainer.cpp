#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>

#include "core/rng.hpp"
#include "nn/loss.hpp"

namespace kiln {

namespace {

// Dropout masks of step t come from rng_bits(seed ^ kDropoutStream, t), epoch
// orders from rng_bits(seed ^ kShuffleStream, shuffles drawn): streams apart.
constexpr uint64_t kDropoutStream = 0x64726f706f7574ull;  // "dropout"
constexpr uint64_t kShuffleStream = 0x73687566666c65ull;  // "shuffle"

constexpr size_t kPassStats = offsetof(StepStats, pass), kStepStats = offsetof(StepStats, step);

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// options, after check_options: the members initialised from them need them
// valid.
const TrainerOptions &checked(const TrainerOptions &options) {
  check_options(options);
  return options;
}

StepConfig step_config(const TrainerOptions &o, DType model_dtype) {
  StepConfig c;
  c.loss = o.loss;
  c.label_smoothing = o.label_smoothing;
  c.grad_clip = o.grad_clip;
  c.bucket_bytes = o.bucket_bytes;
  c.fast_path = fast_path_with_env(o.fast_path);
  c.work = o.precision == KILN_PRECISION_BF16 ? DType::BF16 : model_dtype;
  c.math = o.precision == KILN_PRECISION_TF32 ? MathMode::Tf32 : MathMode::Exact;
  c.precision = option_text(o, Option::precision);
  return c;
}

SourceView view_of(const Dataset::GatherSource &s) {
  SourceView v;
  v.data = s.data;
  v.x = s.x.data(), v.y = s.y.data();
  v.x_type = s.x.dtype(), v.y_type = s.y.dtype();
  v.scale = s.scale, v.shift = s.shift;
  v.cols = s.cols, v.y_cols = s.y_cols;
  return v;
}

}  // namespace

void check_host_labels(const Tensor &y, int64_t classes) {
  const int64_t n = y.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t label = y.dtype() == DType::I64   ? y.data_as<int64_t>()[i]
                    : y.dtype() == DType::I32 ? y.data_as<int32_t>()[i]
                                              : y.data_as<uint8_t>()[i];
    KILN_CHECK(label >= 0 && label < classes, KILN_ERROR_INVALID_ARGUMENT,
               "label " + std::to_string(label) + " of sample " + std::to_string(i) + " is outside [0, " +
                   std::to_string(classes) + "): the model has " + std::to_string(classes) + " outputs");
  }
}


Trainer::Trainer(std::shared_ptr<Model> model, const TrainerOptions &options)
    : model_(std::move(model)),
      options_(checked(options)),
      device_(model_->device()),
      config_(step_config(options_, model_->dtype())),
      optimizer_(options.optimizer_config(), model_->flat()),
      schedule_(options.schedule_config()) {
  check(options.label_smoothing == 0 || options.loss == KILN_LOSS_CROSS_ENTROPY, KILN_ERROR_INVALID_ARGUMENT,
        std::string("label smoothing applies to the cross-entropy loss, not ") + loss_name(options.loss));
  check(model_->num_parameters() > 0, KILN_ERROR_INVALID_ARGUMENT,
        "the model " + model_->description() + " has no parameters to train: it has no Linear layer");
  // The cross-entropy loss takes the logits under a Softmax or LogSoftmax
  // (which is PyTorch's NLLLoss over the log-softmax); MSE and BCE would be
  // taken of the logits too, not of what the model outputs.
  if (model_->output_transform() != KILN_LAYER_LINEAR && options.loss != KILN_LOSS_CROSS_ENTROPY)
    fail(KILN_ERROR_INVALID_ARGUMENT,
         std::string("the model ends in ") + layer_kind_name(model_->output_transform()) +
             ", its output transform: kiln trains the logits under it with the cross-entropy loss, which takes "
             "logits; the " +
             loss_name(options.loss) + " loss would see the logits, not the transformed outputs (train a model "
                                       "without the transform instead)");
  if (options.precision == KILN_PRECISION_TF32 && device_.is_cpu())
    fail(KILN_ERROR_NOT_SUPPORTED, "precision tf32 is a CUDA mode (TF32 tensor cores), not available on the CPU; "
                                   "use fp32 or bf16 there");
  if (options.precision != KILN_PRECISION_FP32)
    check(model_->dtype() == DType::F32, KILN_ERROR_NOT_SUPPORTED,
          "precision " + option_text(options, Option::precision) + " needs an f32 model, not " +
              dtype_name(model_->dtype()));
  const Tensor &params = model_->flat();
  grads_ = Tensor::full(params.context(), params.shape(), params.dtype(), device_, 0.0);
  if (config_.work != params.dtype()) {
    // Zeroed like the step buffers (trainer_buffers.cpp): a CUDA program's
    // compile times cuDNN and cuBLASLt on it before a step's cast writes it
    // (initcheck on the H200, 2026-11-27, the bf16 Linear ops).
    lp_params_ = Tensor::full(params.context(), params.shape(), config_.work, device_, 0.0);
    lp_grads_ = Tensor::full(params.context(), params.shape(), config_.work, device_, 0.0);
  }
  stats_ = Tensor::full(params.context(), Shape{int64_t(sizeof(StepStats) / sizeof(double))}, DType::F64, device_, 0.0);
  buffers_changed();
  rng_seed_ = options.is_set(Option::shuffle_seed) ? options.shuffle_seed : model_->context()->derive_seed();
}

BusyScope::BusyScope(bool &busy, const char *what) : busy_(busy) {
  if (busy_)
    fail(KILN_ERROR_BUSY, std::string("the trainer is busy: ") + what +
                              " was called from inside another call on the same trainer (its progress callback); "
                              "return from the callback first");
  busy_ = true;
}

void Trainer::check_finite(const kiln_epoch_stats &s) const {
  if (std::isfinite(s.train_loss)) return;
  fail(KILN_ERROR_NUMERIC, "training diverged: the mean loss of epoch " + std::to_string(s.epoch) + " is " +
                               std::to_string(s.train_loss) + " (train accuracy " +
                               std::to_string(100 * s.train_accuracy) + "%, lr " + std::to_string(s.lr) +
                               "); lower the learning rate or momentum, or clip gradients");
}

// The checks on the step path are KILN_CHECKs: a step must not allocate.
void Trainer::check_model_device() const {
  KILN_CHECK(model_->device() == device_, KILN_ERROR_INVALID_ARGUMENT,
             "model moved to " + model_->device().str() + " after the trainer was created on " + device_.str() +
                 "; create a new trainer");
}

void Trainer::check_dataset(const Dataset &ds, const char *what) const {
  const int64_t in = model_->input_size(), out = model_->output_size();
  check(ds.num_features() == in, KILN_ERROR_SHAPE_MISMATCH,
        std::string(what) + " has " + std::to_string(ds.num_features()) + " features per sample but the model takes " +
            std::to_string(in));
  if (options_.loss == KILN_LOSS_CROSS_ENTROPY) {
    check(ds.has_class_labels(), KILN_ERROR_DTYPE_MISMATCH,
          std::string(what) + " has float targets but the cross-entropy loss needs class labels");
    check(ds.num_classes() <= out, KILN_ERROR_INVALID_ARGUMENT,
          std::string(what) + " has labels up to " + std::to_string(ds.num_classes() - 1) + " but the model has " +
              std::to_string(out) + " outputs (labels must be in [0, " + std::to_string(out) + "))");
  } else {
    check(!ds.has_class_labels(), KILN_ERROR_DTYPE_MISMATCH,
          std::string(what) + " has class labels but the " + loss_name(options_.loss) + " loss needs float targets");
    check(ds.target_width() == out, KILN_ERROR_SHAPE_MISMATCH,
          std::string(what) + " has targets of width " + std::to_string(ds.target_width()) + " but the model has " +
              std::to_string(out) + " outputs");
  }
}

void Trainer::write_table(int64_t count, int64_t batch, int64_t done) {
  const int64_t first = steps_done_ - done, first_opt = optimizer_.steps() - done;
  for (int64_t i = 0; i < count; ++i) {
    StepParams &e = table_host_[size_t(i)];
    e.lr = scheduled_lr(schedule_, options_.lr, first + i, fit_end_);
    e.step = first_opt + i;
    e.dropout_seed = rng_bits(rng_seed_ ^ kDropoutStream, uint64_t(first + i));
    e.offset = i * batch;
  }
  table_.rows(0, count * int64_t(sizeof(StepParams)))
      .copy_from_host(table_host_.data(), count * int64_t(sizeof(StepParams)));
}

void Trainer::pass_order(const Dataset &ds, const Dataset::GatherSource &source, const uint64_t *shuffle,
                         bool pad) {
  const int64_t n = ds.size();
  Backend &b = stats_.backend();
  int64_t *order = order_device_.data_as<int64_t>();
  // The same permutation on every rank: the seed is rank 0's (attach) and
  // every rank draws the same number of shuffles.
  if (shuffle) b.shuffle(device_.index, n, rng_bits(rng_seed_ ^ kShuffleStream, *shuffle), order);
  else b.arange(device_.index, ArangeArgs{DType::I64, n, order, 0, 1});
  const int64_t count = shards_.count(n, pad);
  if (comm_ && count > 0) {  // this rank's positions of the order
    if (shard_n_ != n || shard_pad_ != pad) {
      const std::vector<int64_t> positions = shards_.positions(n, pad);
      Tensor t = Tensor::empty(model_->context(), Shape{count}, DType::I64, device_);
      t.copy_from_host(positions.data(), count * int64_t(sizeof(int64_t)));
      shard_positions_ = t;
      shard_n_ = n, shard_pad_ = pad;
    }
    GatherArgs pick;
    pick.order = shard_positions_.data_as<int64_t>();
    pick.count = count;
    pick.y_type = DType::I64, pick.y = order, pick.out_y = rows_device_.data();
    b.gather(device_.index, pick, nullptr);
    b.copy_on_device(device_.index, order, rows_device_.data(), count * int64_t(sizeof(int64_t)));
  }
  source.rows_of(order, count, rows_device_.data_as<int64_t>());
}

void Trainer::run_pass_steps(bool trains, int64_t first, int64_t count, int64_t n, int64_t batch,
                             const SourceView &source) {
  const int64_t full = n / batch;  // batches of `batch` rows; one more of n % batch rows if any
  const bool training = trains && model_->training();
  const int64_t end = first + count;
  if (first < full) {
    const int64_t last = std::min(end, full);
    program(trains, training, batch, &source).run(first, last - first);
    if (trains) {
      steps_done_ += last - first;
      optimizer_.set_steps(optimizer_.steps() + (last - first));
    }
  }
  if (end > full) {
    program(trains, training, n - full * batch, &source).run(full, 1);
    if (trains) {
      ++steps_done_;
      optimizer_.set_steps(optimizer_.steps() + 1);
    }
  }
}

int64_t Trainer::resumed_batches(const Dataset &ds) const {
  const bool same = resume_.samples == ds.size() && resume_.batch == epoch_batch(ds) &&
                    resume_.batches < batches_per_epoch(ds);
  return resume_.batches > 0 && same && shards_.ranks == 1 ? resume_.batches : 0;
}

int64_t Trainer::epoch_batch(const Dataset &ds) const {
  return std::max<int64_t>(1, std::min(options_.batch_size, shards_.count(ds.size(), true)));
}

int64_t Trainer::batches_per_epoch(const Dataset &ds) const {
  const int64_t n = shards_.count(ds.size(), true), batch = epoch_batch(ds);
  return (n + batch - 1) / batch;
}

void Trainer::check_counters(int64_t steps) const {
  KILN_CHECK(steps <= kCounterLimit - 1 - steps_done_ && epochs_done_ < kCounterLimit - 1,
             KILN_ERROR_INVALID_ARGUMENT,
             "this trainer has counted " + std::to_string(steps_done_) + " steps and " + std::to_string(epochs_done_) +
                 " epochs: " + std::to_string(steps) + " more would pass 2^62, the limit of kiln's counters");
}

double Trainer::step(const Tensor &x, const Tensor &y, bool want_loss) {
  BusyScope busy(busy_, "kiln_trainer_step");
  check_counters(1);
  check_model_device();
  resume_ = EpochPosition{};  // a step between: the epoch's steps would no longer follow on
  const int64_t in = model_->input_size(), out = model_->output_size();
  KILN_CHECK(dtype_is_float(x.dtype()) || x.dtype() == DType::U8, KILN_ERROR_DTYPE_MISMATCH,
             std::string("x must be a float or u8 tensor, got ") + dtype_name(x.dtype()));
  KILN_CHECK(x.ndim() >= 2 && x.dim(0) >= 1 && x.numel() == x.dim(0) * in, KILN_ERROR_SHAPE_MISMATCH,
             "x has shape " + x.shape().str() + " but the model takes [batch >= 1, " + std::to_string(in) + "]");
  const int64_t rows = x.dim(0);
  check_target(options_.loss, rows, out, y);
  if (options_.loss == KILN_LOSS_CROSS_ENTROPY && y.device().is_cpu()) check_host_labels(y, out);
  ensure_capacity(rows);
  ensure_order(1);

  stage(x, batch_x_, rows);
  stage(y, batch_y_, rows);
  // Copies from page-locked host memory are asynchronous: wait for them, so
  // the caller may refill x and y as soon as the step returns.
  const auto pinned_host = [](const Tensor &t) { return t.device().is_cpu() && t.pinned(); };
  if (!device_.is_cpu() && (pinned_host(x) || pinned_host(y))) stats_.backend().synchronize(device_.index);
  if (!(window_valid_ && steps_done_ >= window_first_ && steps_done_ < window_first_ + kStepWindow &&
        optimizer_.steps() - steps_done_ == window_opt_steps_ - window_first_ && fit_end_ == window_fit_end_)) {
    write_table(kStepWindow, 0);
    window_valid_ = true;
    window_first_ = steps_done_;
    window_opt_steps_ = optimizer_.steps();
    window_fit_end_ = fit_end_;
  }
  clear_stats(kStepStats);
  program(true, model_->training(), rows, nullptr).run(steps_done_ - window_first_, 1);
  ++steps_done_;
  optimizer_.set_steps(optimizer_.steps() + 1);
  if (!want_loss) return 0;
  const PassStats stats = read_stats(kStepStats);
  KILN_CHECK(stats.bad_labels == 0, KILN_ERROR_INVALID_ARGUMENT,
             "labels outside [0, " + std::to_string(out) + ") in the batch (the model has " + std::to_string(out) +
                 " outputs); the update was applied with them counted as loss 0");
  return stats.loss_sum / loss_count(options_.loss, rows, out);
}

void Trainer::clear_stats(size_t offset) {
  stats_.backend().fill(device_.index, FillArgs{DType::F64, 3, stats_field(stats_.data(), offset), 0.0});
}

void Trainer::write_stats(size_t offset, const PassStats &s) {
  stats_.rows(int64_t(offset / sizeof(double)), int64_t(offset / sizeof(double)) + 3).copy_from_host(&s, sizeof s);
}

PassStats Trainer::read_stats(size_t offset) const {
  PassStats s;
  stats_.rows(int64_t(offset / sizeof(double)), int64_t(offset / sizeof(double)) + 3).copy_to_host(&s, sizeof s);
  return s;
}

kiln_epoch_stats Trainer::run_epoch(const Dataset &ds, int64_t epoch_index, int64_t epochs, kiln_progress_fn callback,
                                    void *user) {
  check_model_device();
  check_dataset(ds, "the training dataset");
  check_same_size(ds, "the training dataset");
  // n: this rank's samples (all of them in one process); total: every rank's.
  const int64_t n = shards_.count(ds.size(), true);
  const int64_t total = n * shards_.ranks;
  const int64_t batch = std::min(options_.batch_size, n);
  const int64_t batches = (n + batch - 1) / batch;
  ensure_capacity(batch);
  ensure_order(ds.size());
  const Clock::time_point start = Clock::now();
  const Dataset::GatherSource source = ds.gather_source(device_);
  // A checkpoint written within an epoch over this data resumes it: its
  // order, its steps' table entries and its statistics so far.
  const int64_t resumed = resumed_batches(ds);
  const uint64_t shuffle = resumed ? resume_.shuffle : rng_counter_++;
  const PassStats so_far_before = resume_.so_far;
  resume_ = EpochPosition{};
  pass_order(ds, source, &shuffle, true);
  window_valid_ = false;
  write_table(batches, batch, resumed);

  if (resumed) write_stats(kPassStats, so_far_before);
  else clear_stats(kPassStats);
  const SourceView view = view_of(source);
  const int64_t interval = callback && options_.progress_interval > 0 ? options_.progress_interval : batches;
  for (int64_t first = resumed; first < batches; first += interval) {
    const int64_t count = std::min(interval, batches - first);
    run_pass_steps(true, first, count, n, batch, view);
    if (first + count < batches) {  // a progress report within the epoch: this rank's loss, not reduced
      const PassStats so_far = read_stats(kPassStats);
      // What a checkpoint written from the callback records (one process
      // only: another rank's statistics differ, and rank 0 writes).
      struct Position {
        EpochPosition &p;
        ~Position() { p = EpochPosition{}; }
      } position{in_epoch_};
      if (shards_.ranks == 1) in_epoch_ = EpochPosition{first + count, ds.size(), batch, shuffle, so_far};
      const double elapsed = seconds_since(start);
      const int64_t done = std::min(n, (first + count) * batch);
      kiln_progress p{};
      p.struct_size = sizeof p;
      p.phase = KILN_PROGRESS_BATCH;
      p.epoch = epoch_index;
      p.epochs = epochs;
      p.batch = first + count;
      p.batches = batches;
      p.loss = so_far.loss_sum / loss_count(options_.loss, done, model_->output_size());
      p.samples_per_second = elapsed > 0 ? double(done * shards_.ranks) / elapsed : 0;
      p.elapsed_seconds = elapsed;
      if (callback(user, &p) != 0)
        fail(KILN_ERROR_CANCELLED, "training cancelled by the progress callback in epoch " +
                                       std::to_string(epoch_index) + " after batch " + std::to_string(first + count) +
                                       " of " + std::to_string(batches));
      // The callback may have moved the model (kiln_model_to): the steps
      // would go on updating the storage it left.
      check_model_device();
    }
  }
  PassStats stats = read_stats(kPassStats);
  reduce_stats(stats);
  const double seconds = seconds_since(start);
  const int64_t out = model_->output_size();
  check(stats.bad_labels == 0, KILN_ERROR_INVALID_ARGUMENT,
        std::to_string(int64_t(stats.bad_labels)) + " labels of the epoch are outside [0, " + std::to_string(out) +
            "): the model has " + std::to_string(out) + " outputs");
  ++epochs_done_;
  kiln_epoch_stats s{};
  s.struct_size = sizeof s;
  s.epoch = epochs_done_;
  s.train_loss = stats.loss_sum / loss_count(options_.loss, total, out);
  s.train_accuracy = options_.loss == KILN_LOSS_CROSS_ENTROPY ? stats.correct / double(total) : 0;
  s.seconds = seconds;
  s.samples_per_second = seconds > 0 ? double(total) / seconds : 0;
  s.lr = current_lr();
  return s;
}

kiln_epoch_stats Trainer::epoch(const Dataset &dataset) {
  BusyScope busy(busy_, "kiln_trainer_epoch");
  check_counters(batches_per_epoch(dataset));
  const kiln_epoch_stats s = run_epoch(dataset, epochs_done_ + 1, 1, nullptr, nullptr);
  check_finite(s);
  return s;
}

void Trainer::evaluate(const Dataset &ds, double *loss, double *accuracy) {
  BusyScope busy(busy_, "kiln_trainer_evaluate");
  evaluate_pass(ds, loss, accuracy);
}

void Trainer::evaluate_pass(const Dataset &ds, double *loss, double *accuracy) {
  check_model_device();
  check_dataset(ds, "the evaluation dataset");
  check_same_size(ds, "the evaluation dataset");
  // Each rank evaluates its share (possibly none: fewer samples than ranks).
  const int64_t n = ds.size(), local = shards_.count(n, false);
  const int64_t batch = std::max<int64_t>(1, std::min(options_.batch_size, local));
  const int64_t batches = (local + batch - 1) / batch;
  ensure_capacity(batch);
  ensure_order(n);
  const Dataset::GatherSource source = ds.gather_source(device_);
  pass_order(ds, source, nullptr, false);
  window_valid_ = false;
  if (batches > 0) write_table(batches, batch);
  clear_stats(kPassStats);
  if (batches > 0) run_pass_steps(false, 0, batches, local, batch, view_of(source));
  PassStats stats = read_stats(kPassStats);
  reduce_stats(stats);
  const int64_t out = model_->output_size();
  check(stats.bad_labels == 0, KILN_ERROR_INVALID_ARGUMENT,
        std::to_string(int64_t(stats.bad_labels)) + " labels of the dataset are outside [0, " + std::to_string(out) +
            ")");
  *loss = stats.loss_sum / loss_count(options_.loss, n, out);
  *accuracy = options_.loss == KILN_LOSS_CROSS_ENTROPY ? stats.correct / double(n) : 0;
}

std::shared_ptr<History> Trainer::fit(const Dataset &train, const Dataset *validation, int64_t epochs,
                                      kiln_progress_fn callback, void *user) {
  BusyScope busy(busy_, "kiln_trainer_fit");
  check(epochs >= 1, KILN_ERROR_INVALID_ARGUMENT, "epochs must be >= 1, got " + std::to_string(epochs));
  check_model_device();
  check_dataset(train, "the training dataset");
  if (validation) check_dataset(*validation, "the validation dataset");
  const int64_t batches = batches_per_epoch(train);

  // The cosine schedule without total_steps spans this fit; the end is
  // forgotten however fit leaves.
  struct FitEnd {
    int64_t &end;
    ~FitEnd() { end = 0; }
  } fit_end{fit_end_};
  check(epochs <= (kCounterLimit - 1 - steps_done_) / std::max<int64_t>(1, batches) &&
            epochs < kCounterLimit - epochs_done_,
        KILN_ERROR_INVALID_ARGUMENT,
        std::to_string(epochs) + " epochs of " + std::to_string(batches) + " steps are more steps than kiln counts");
  fit_end_ = steps_done_ - resumed_batches(train) + epochs * batches;

  auto history = std::make_shared<History>();
  history->epochs.reserve(size_t(std::min<int64_t>(epochs, 1024)));  // grows past that as epochs finish
  for (int64_t e = 1; e <= epochs; ++e) {
    model_->set_training(true);
    kiln_epoch_stats s = run_epoch(train, e, epochs, callback, user);
    check_finite(s);
    if (validation) {
      evaluate_pass(*validation, &s.val_loss, &s.val_accuracy);
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
  return scheduled_lr(schedule_, options_.lr, steps_done_, fit_end_);
}

}  // namespace kiln
