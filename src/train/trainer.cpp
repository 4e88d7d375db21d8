#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/excerpt.hpp"
#include "core/rng.hpp"
#include "nn/loss.hpp"
#include "nn/optimizer.hpp"
#include "train/gradient_reduce.hpp"

namespace kiln {

namespace {

// Layout of the trainer's F64 statistics buffer: each region holds the three
// doubles a loss kernel adds into (loss sum, correct count, bad labels).
constexpr int64_t kStatsPass = 0;  // the running epoch or evaluation
constexpr int64_t kStatsStep = 3;  // one kiln_trainer_step
constexpr int64_t kStatsClip = 6;  // clip_grad_norm's scratch double
constexpr int64_t kStatsSize = 7;

// Dropout masks of step t come from rng_bits(seed ^ kDropoutStream, t), epoch
// orders from rng_bits(seed ^ kShuffleStream, shuffles drawn): streams apart.
constexpr uint64_t kDropoutStream = 0x64726f706f7574ull;  // "dropout"
constexpr uint64_t kShuffleStream = 0x73687566666c65ull;  // "shuffle"

// Caller steps written into the step table at once.
constexpr int64_t kStepWindow = 256;
// Compiled programs kept per trainer (training, evaluation, last batches...).
constexpr size_t kMaxPrograms = 8;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

void check_host_labels(const Tensor &y, int64_t classes) {
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

namespace {

const char *precision_name(kiln_precision p) {
  switch (p) {
    case KILN_PRECISION_FP32: return "fp32";
    case KILN_PRECISION_TF32: return "tf32";
    case KILN_PRECISION_BF16: return "bf16";
  }
  return "?";
}

// FNV-1a, 64 bits: enough to tell two configurations apart, not a security
// measure.
uint64_t fnv1a(const std::string &text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Everything that must be equal on every rank of a distributed run for the
// ranks to compute the same update: the model and the options that shape a
// step. Doubles as %a, exactly.
std::string training_fingerprint(const Model &m, const TrainerOptions &o, kiln_precision precision) {
  const OptimizerConfig c = o.resolved_optimizer();
  const ScheduleConfig &sc = o.schedule;
  char text[512];
  std::snprintf(text, sizeof text,
                "loss %d lr %a optim %d %a %d %a %a %a %a batch %lld clip %a schedule %d %lld %a %lld %a %lld "
                "seed %d %llu precision %d buckets %lld",
                int(o.loss), o.lr, int(c.kind), c.momentum, int(c.nesterov), c.weight_decay, c.beta1, c.beta2, c.eps,
                static_cast<long long>(o.batch_size), o.grad_clip, int(sc.kind), static_cast<long long>(sc.step_size),
                sc.gamma, static_cast<long long>(sc.total_steps), sc.min_lr, static_cast<long long>(sc.warmup),
                int(o.shuffle_seed_set), static_cast<unsigned long long>(o.shuffle_seed), int(precision),
                static_cast<long long>(o.bucket_bytes));
  return m.description() + " " + dtype_name(m.dtype()) + " " + text;
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
      work_dtype_(options.precision == KILN_PRECISION_BF16 ? DType::BF16 : model_->dtype()),
      math_(options.precision == KILN_PRECISION_TF32 ? MathMode::Tf32 : MathMode::Exact),
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
  if (options.precision == KILN_PRECISION_TF32 && device_.is_cpu())
    fail(KILN_ERROR_NOT_SUPPORTED, "precision tf32 is a CUDA mode (TF32 tensor cores), not available on the CPU; "
                                   "use fp32 or bf16 there");
  if (options.precision != KILN_PRECISION_FP32)
    check(model_->dtype() == DType::F32, KILN_ERROR_NOT_SUPPORTED,
          std::string("precision ") + precision_name(options.precision) + " needs an f32 model, not " +
              dtype_name(model_->dtype()));
  options_.fast_path &= fast_path_from_env();
  const Tensor &params = model_->flat();
  grads_ = Tensor::full(params.context(), params.shape(), params.dtype(), device_, 0.0);
  if (work_dtype_ != params.dtype()) {
    lp_params_ = Tensor::empty(params.context(), params.shape(), work_dtype_, device_);
    lp_grads_ = Tensor::full(params.context(), params.shape(), work_dtype_, device_, 0.0);
  }
  stats_ = Tensor::full(params.context(), Shape{kStatsSize}, DType::F64, device_, 0.0);
  rng_seed_ = options.shuffle_seed_set ? options.shuffle_seed : model_->context()->derive_seed();
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
  const int64_t out = model_->output_size();
  Workspace ws = model_->make_workspace(rows, work_dtype_);
  Tensor x = Tensor::empty(ctx, Shape{rows, model_->input_size()}, work_dtype_, device_);
  Tensor y = options_.loss == KILN_LOSS_CROSS_ENTROPY ? Tensor::empty(ctx, Shape{rows}, DType::I64, device_)
                                                      : Tensor::empty(ctx, Shape{rows, out}, model_->dtype(), device_);
  Tensor logits32, dlogits32;
  if (work_dtype_ != model_->dtype()) {
    logits32 = Tensor::empty(ctx, Shape{rows, out}, model_->dtype(), device_);
    dlogits32 = Tensor::empty(ctx, Shape{rows, out}, model_->dtype(), device_);
  }
  programs_.clear();  // they name the old buffers
  ws_ = std::move(ws);
  batch_x_ = x;
  batch_y_ = y;
  logits32_ = logits32;
  dlogits32_ = dlogits32;
  capacity_ = rows;
}

void Trainer::ensure_order(int64_t n) {
  const std::shared_ptr<Context> &ctx = model_->context();
  if (!order_device_.defined() || order_device_.numel() < n) {
    Tensor order = Tensor::empty(ctx, Shape{n}, DType::I64, device_);
    Tensor rows = Tensor::empty(ctx, Shape{n}, DType::I64, device_);
    programs_.clear();
    order_device_ = order;
    rows_device_ = rows;
  }
  const int64_t entries = std::max(n, kStepWindow);
  if (table_entries_ < entries) {
    Tensor table = Tensor::empty(ctx, Shape{entries * int64_t(sizeof(StepParams))}, DType::U8, device_);
    programs_.clear();
    table_ = table;
    table_entries_ = entries;
    table_host_.resize(size_t(entries));
    window_valid_ = false;
  }
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

Executable &Trainer::program(bool trains, bool training, int64_t rows, const Dataset::GatherSource *source) {
  const void *source_x = source ? source->x.data() : nullptr;
  for (size_t i = 0; i < programs_.size(); ++i) {
    Program &p = programs_[i];
    if (p.trains == trains && p.training == training && p.rows == rows && p.source == source_x) {
      std::rotate(programs_.begin() + long(i), programs_.begin() + long(i) + 1, programs_.end());
      return *programs_.back().exe;
    }
  }
  const Model &m = *model_;
  const int64_t out = m.output_size();
  StepProgram p;
  p.rows = rows;
  p.trains = trains;
  p.table = static_cast<const StepParams *>(table_.data());
  p.table_size = table_entries_;
  p.fast_path = options_.fast_path;
  // A training step with a communicator waits for its allreduces on the
  // host: it must not be captured in a CUDA graph (core/program.hpp).
  if (comm_ && trains) p.fast_path &= ~uint32_t(kFastGraphs);
  p.label = std::string(trains ? "train " : "evaluate ") + m.description() + " rows " + std::to_string(rows) + " " +
            precision_name(options_.precision);
  const bool mixed = work_dtype_ != m.dtype();
  const void *params = m.flat().data();
  if (mixed) {
    CastOp cast;
    cast.args.from = m.dtype(), cast.args.to = work_dtype_;
    cast.args.n = m.flat().numel();
    cast.args.in = params, cast.args.out = lp_params_.data();
    p.ops.push_back(cast);
    params = lp_params_.data();
  }
  if (source)
    p.ops.push_back(GatherOp{source->args(rows_device_.data_as<int64_t>(), rows, work_dtype_, batch_x_.data(),
                                          batch_y_.dtype(), batch_y_.data())});
  std::vector<const void *> acts;
  const void *logits = m.append_forward(p.ops, ws_, batch_x_.data(), params, math_, rows, training, &acts);
  void *dlogits = trains ? ws_.grad.back().data() : nullptr;
  double *stats = stats_.data_as<double>() + (source ? kStatsPass : kStatsStep);
  if (mixed) {  // the loss in f32, from and to the bf16 activations
    CastOp up;
    up.args.from = work_dtype_, up.args.to = m.dtype();
    up.args.n = rows * out;
    up.args.in = logits, up.args.out = logits32_.data();
    p.ops.push_back(up);
    p.ops.push_back(loss_op(options_.loss, m.dtype(), rows, out, logits32_.data(), batch_y_.data(),
                            trains ? dlogits32_.data() : nullptr, stats));
    if (trains) {
      CastOp down;
      down.args.from = m.dtype(), down.args.to = work_dtype_;
      down.args.n = rows * out;
      down.args.in = dlogits32_.data(), down.args.out = dlogits;
      p.ops.push_back(down);
    }
  } else {
    p.ops.push_back(loss_op(options_.loss, m.dtype(), rows, out, logits, batch_y_.data(), dlogits, stats));
  }
  if (trains) {
    const size_t backward_begin = p.ops.size();
    m.append_backward(p.ops, ws_, acts, params, mixed ? lp_grads_.data() : grads_.data(), math_, rows, training);
    // Before clipping: every rank clips and updates with the same mean gradient.
    GradientBuffers g;
    g.t = m.dtype(), g.grads = grads_.data(), g.n = grads_.numel();
    g.work = work_dtype_, g.work_grads = mixed ? lp_grads_.data() : grads_.data();
    const int64_t buckets = finish_gradients(p.ops, backward_begin, g, comm_.get(), options_.bucket_bytes);
    if (buckets > 0) p.label += ", " + std::to_string(buckets) + " allreduce bucket" + (buckets > 1 ? "s" : "");
    if (options_.grad_clip > 0) {
      ClipOp clip;
      clip.args.t = m.dtype();
      clip.args.n = grads_.numel();
      clip.args.grads = grads_.data();
      clip.args.max_norm = options_.grad_clip;
      clip.args.scratch = stats_.data_as<double>() + kStatsClip;
      p.ops.push_back(clip);
    }
    p.ops.push_back(optimizer_.update_op(m.flat(), grads_));
  }
  Program compiled;
  compiled.trains = trains;
  compiled.training = training;
  compiled.rows = rows;
  compiled.source = source_x;
  compiled.exe = m.flat().backend().compile(device_.index, p);
  m.context()->log(KILN_LOG_DEBUG, "compiled " + p.label + ": " + compiled.exe->describe());
  if (programs_.size() >= kMaxPrograms) programs_.erase(programs_.begin());
  programs_.push_back(std::move(compiled));
  return *programs_.back().exe;
}

void Trainer::write_table(int64_t count, int64_t batch) {
  const int64_t first_opt = optimizer_.steps();
  for (int64_t i = 0; i < count; ++i) {
    StepParams &e = table_host_[size_t(i)];
    e.lr = scheduled_lr(options_.schedule, options_.lr, steps_done_ + i, fit_end_);
    e.step = first_opt + i;
    e.dropout_seed = rng_bits(rng_seed_ ^ kDropoutStream, uint64_t(steps_done_ + i));
    e.offset = i * batch;
  }
  table_.rows(0, count * int64_t(sizeof(StepParams)))
      .copy_from_host(table_host_.data(), count * int64_t(sizeof(StepParams)));
}

int64_t Trainer::local_count(int64_t n, bool pad) const {
  if (!comm_) return n;
  const int64_t ranks = comm_->size(), rank = comm_->rank();
  if (pad) return (n + ranks - 1) / ranks;
  return rank < n ? (n - rank + ranks - 1) / ranks : 0;
}

const int64_t *Trainer::pass_order(const Dataset &ds, const Dataset::GatherSource &source, bool shuffle, bool pad) {
  const int64_t n = ds.size();
  Backend &b = stats_.backend();
  int64_t *order = order_device_.data_as<int64_t>();
  // The same permutation on every rank: the seed is rank 0's (attach) and
  // every rank draws the same number of shuffles.
  if (shuffle) b.shuffle(device_.index, n, rng_bits(rng_seed_ ^ kShuffleStream, rng_counter_++), order);
  else b.arange(device_.index, ArangeArgs{DType::I64, n, order, 0, 1});
  const int64_t count = local_count(n, pad);
  if (comm_ && count > 0) {  // this rank's positions r, r + N, ... (mod n when padded) of the order
    if (shard_n_ != n || shard_pad_ != pad) {
      std::vector<int64_t> positions(static_cast<size_t>(count));
      for (int64_t j = 0; j < count; ++j) positions[size_t(j)] = (comm_->rank() + j * comm_->size()) % n;
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
  return source.rows_of(order, count, rows_device_.data_as<int64_t>());
}

void Trainer::run_pass_steps(bool trains, int64_t first, int64_t count, int64_t n, int64_t batch,
                             const Dataset::GatherSource &source) {
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

double Trainer::step(const Tensor &x, const Tensor &y, bool want_loss) {
  BusyScope busy(busy_, "kiln_trainer_step");
  check_model_device();
  const int64_t in = model_->input_size(), out = model_->output_size();
  if (!dtype_is_float(x.dtype()) && x.dtype() != DType::U8)
    fail(KILN_ERROR_DTYPE_MISMATCH, std::string("x must be a float or u8 tensor, got ") + dtype_name(x.dtype()));
  if (x.ndim() < 2 || x.dim(0) < 1 || x.numel() != x.dim(0) * in)
    fail(KILN_ERROR_SHAPE_MISMATCH,
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
  Backend &b = stats_.backend();
  double *stats = stats_.data_as<double>() + kStatsStep;
  b.fill(device_.index, FillArgs{DType::F64, 3, stats, 0.0});
  program(true, model_->training(), rows, nullptr).run(steps_done_ - window_first_, 1);
  ++steps_done_;
  optimizer_.set_steps(optimizer_.steps() + 1);
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

void Trainer::reduce_stats(double stats[3]) const {
  if (comm_) comm_->allreduce(Device::cpu(), DType::F64, stats, 3, false);
}

void Trainer::check_same_size(const Dataset &ds, const char *what) const {
  if (!comm_) return;
  // Ranks with datasets of different sizes would run different numbers of
  // steps and pair one rank's allreduce with another's next one.
  const int64_t mine = ds.size();
  std::vector<int64_t> all(size_t(comm_->size()));
  comm_->allgather(&mine, sizeof mine, all.data());
  for (size_t r = 1; r < all.size(); ++r)
    check(all[r] == all[0], KILN_ERROR_INVALID_ARGUMENT,
          std::string(what) + " has " + std::to_string(all[r]) + " samples on rank " + std::to_string(r) + " but " +
              std::to_string(all[0]) + " on rank 0: every rank must pass the same dataset");
}

kiln_epoch_stats Trainer::run_epoch(const Dataset &ds, int64_t epoch_index, int64_t epochs, kiln_progress_fn callback,
                                    void *user) {
  check_model_device();
  check_dataset(ds, "the training dataset");
  check_same_size(ds, "the training dataset");
  // n: this rank's samples (all of them in one process); total: every rank's.
  const int64_t n = local_count(ds.size(), true);
  const int64_t total = comm_ ? n * comm_->size() : n;
  const int64_t batch = std::min(options_.batch_size, n);
  const int64_t batches = (n + batch - 1) / batch;
  ensure_capacity(batch);
  ensure_order(ds.size());
  const Clock::time_point start = Clock::now();
  const Dataset::GatherSource source = ds.gather_source(device_);
  pass_order(ds, source, true, true);
  window_valid_ = false;
  write_table(batches, batch);

  Backend &b = stats_.backend();
  b.fill(device_.index, FillArgs{DType::F64, 3, stats_.data_as<double>() + kStatsPass, 0.0});
  const int64_t interval = callback && options_.progress_interval > 0 ? options_.progress_interval : batches;
  for (int64_t first = 0; first < batches; first += interval) {
    const int64_t count = std::min(interval, batches - first);
    run_pass_steps(true, first, count, n, batch, source);
    if (first + count < batches) {  // a progress report within the epoch: this rank's loss, not reduced
      double host[3];
      read_stats(kStatsPass, host);
      const double elapsed = seconds_since(start);
      const int64_t done = std::min(n, (first + count) * batch);
      kiln_progress p{};
      p.struct_size = sizeof p;
      p.phase = KILN_PROGRESS_BATCH;
      p.epoch = epoch_index;
      p.epochs = epochs;
      p.batch = first + count;
      p.batches = batches;
      p.loss = host[0] / loss_count(options_.loss, done, model_->output_size());
      p.samples_per_second = elapsed > 0 ? double(comm_ ? done * comm_->size() : done) / elapsed : 0;
      p.elapsed_seconds = elapsed;
      if (callback(user, &p) != 0)
        fail(KILN_ERROR_CANCELLED, "training cancelled by the progress callback in epoch " +
                                       std::to_string(epoch_index) + " after batch " + std::to_string(first + count) +
                                       " of " + std::to_string(batches));
    }
  }
  double host[3];
  read_stats(kStatsPass, host);
  reduce_stats(host);
  const double seconds = seconds_since(start);
  const int64_t out = model_->output_size();
  check(host[2] == 0, KILN_ERROR_INVALID_ARGUMENT,
        std::to_string(int64_t(host[2])) + " labels of the epoch are outside [0, " + std::to_string(out) +
            "): the model has " + std::to_string(out) + " outputs");
  ++epochs_done_;
  kiln_epoch_stats s{};
  s.struct_size = sizeof s;
  s.epoch = epochs_done_;
  s.train_loss = host[0] / loss_count(options_.loss, total, out);
  s.train_accuracy = options_.loss == KILN_LOSS_CROSS_ENTROPY ? host[1] / double(total) : 0;
  s.seconds = seconds;
  s.samples_per_second = seconds > 0 ? double(total) / seconds : 0;
  s.lr = current_lr();
  return s;
}

kiln_epoch_stats Trainer::epoch(const Dataset &dataset) {
  BusyScope busy(busy_, "kiln_trainer_epoch");
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
  const int64_t n = ds.size(), local = local_count(n, false);
  const int64_t batch = std::max<int64_t>(1, std::min(options_.batch_size, local));
  const int64_t batches = (local + batch - 1) / batch;
  ensure_capacity(batch);
  ensure_order(n);
  const Dataset::GatherSource source = ds.gather_source(device_);
  pass_order(ds, source, false, false);
  window_valid_ = false;
  if (batches > 0) write_table(batches, batch);
  double *stats = stats_.data_as<double>() + kStatsPass;
  stats_.backend().fill(device_.index, FillArgs{DType::F64, 3, stats, 0.0});
  if (batches > 0) run_pass_steps(false, 0, batches, local, batch, source);
  double host[3];
  read_stats(kStatsPass, host);
  reduce_stats(host);
  const int64_t out = model_->output_size();
  check(host[2] == 0, KILN_ERROR_INVALID_ARGUMENT,
        std::to_string(int64_t(host[2])) + " labels of the dataset are outside [0, " + std::to_string(out) + ")");
  *loss = host[0] / loss_count(options_.loss, n, out);
  *accuracy = options_.loss == KILN_LOSS_CROSS_ENTROPY ? host[1] / double(n) : 0;
}
std::shared_ptr<History> Trainer::fit(const Dataset &train, const Dataset *validation, int64_t epochs,
                                      kiln_progress_fn callback, void *user) {
  BusyScope busy(busy_, "kiln_trainer_fit");
  check(epochs >= 1, KILN_ERROR_INVALID_ARGUMENT, "epochs must be >= 1, got " + std::to_string(epochs));
  check_model_device();
  check_dataset(train, "the training dataset");
  if (validation) check_dataset(*validation, "the validation dataset");
  const int64_t n = local_count(train.size(), true);
  const int64_t batch = std::min(options_.batch_size, n);
  const int64_t batches = (n + batch - 1) / batch;

  // The cosine schedule without total_steps spans this fit; the end is
  // forgotten however fit leaves.
  struct FitEnd {
    int64_t &end;
    ~FitEnd() { end = 0; }
  } fit_end{fit_end_};
  check(epochs <= (INT64_MAX / 2 - steps_done_) / batches, KILN_ERROR_INVALID_ARGUMENT,
        std::to_string(epochs) + " epochs of " + std::to_string(batches) + " steps are more steps than kiln counts");
  fit_end_ = steps_done_ + epochs * batches;

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

void Trainer::attach(std::shared_ptr<Collective> comm) {
  check_model_device();
  check(comm != nullptr, KILN_ERROR_INVALID_ARGUMENT, "communicator is null");
  check(comm->supports(device_), KILN_ERROR_NOT_SUPPORTED,
        "the communicator (" + comm->describe() + ") cannot reduce buffers on " + device_.str());
  // Compare before exchanging anything else, so a mismatch is reported as
  // such and not as a broadcast of the wrong size.
  const uint64_t mine = fnv1a(training_fingerprint(*model_, options_, options_.precision));
  std::vector<uint64_t> all(size_t(comm->size()));
  comm->allgather(&mine, sizeof mine, all.data());
  std::string differ;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  check(differ.empty(), KILN_ERROR_INVALID_ARGUMENT,
        "the model or trainer options of rank(s) " + differ + " differ from rank 0's (spec, dtype, loss, lr, "
        "optimizer, batch size, clipping, schedule, shuffle seed, precision or allreduce bucket size); this rank has " +
            excerpt(training_fingerprint(*model_, options_, options_.precision), 300));

  // Rank 0's weights, optimizer state and counters, so every rank starts
  // from the same point (a rank that resumed a checkpoint, or seeded its
  // context differently, included).
  broadcast_parameters(*comm);
  for (const auto &state : optimizer_.state())
    comm->broadcast(device_, state.second.data(), state.second.numel() * dtype_size(state.second.dtype()), 0);
  int64_t counters[5] = {int64_t(rng_seed_), int64_t(rng_counter_), steps_done_, epochs_done_, optimizer_.steps()};
  comm->broadcast(Device::cpu(), counters, sizeof counters, 0);
  rng_seed_ = uint64_t(counters[0]), rng_counter_ = uint64_t(counters[1]);
  steps_done_ = counters[2], epochs_done_ = counters[3];
  optimizer_.set_steps(counters[4]);
  comm_ = std::move(comm);
  shard_n_ = -1;
  window_valid_ = false;
  programs_.clear();  // they lack the allreduce
}

void Trainer::broadcast_parameters(Collective &comm) {
  const Tensor &params = model_->flat();
  if (!device_.is_cpu()) params.backend().synchronize(device_.index);
  comm.broadcast(device_, params.data(), params.numel() * dtype_size(params.dtype()), 0);
}

double Trainer::current_lr() const {
  return scheduled_lr(options_.schedule, options_.lr, steps_done_, fit_end_);
}

}  // namespace kiln
