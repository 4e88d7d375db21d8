// C entry points: losses, trainer options, trainers, histories.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "api/handles.hpp"
#include "nn/loss.hpp"
#include "train/data_parallel.hpp"

namespace {

using kiln::api::checked_enum;
using kiln::api::guard;
using kiln::api::query;
using kiln::api::lookup;
using kiln::api::require;
using kiln::api::value;

kiln::TrainerOptions &options_of(kiln_trainer_options *options) { return *lookup(options, "options")->value; }

// The caller's kiln_epoch_stats may be an older, smaller struct: checks its
// struct_size and copies what fits, keeping the caller's struct_size.
void check_stats_out(const kiln_epoch_stats *out) {
  require(out, "out");
  kiln::check(out->struct_size >= sizeof(uint32_t), KILN_ERROR_INVALID_ARGUMENT,
              "out->struct_size must be set to sizeof(kiln_epoch_stats), got " + std::to_string(out->struct_size));
}

void copy_stats(const kiln_epoch_stats &src, kiln_epoch_stats *out) {
  const uint32_t size = out->struct_size;
  std::memcpy(out, &src, std::min<size_t>(size, sizeof src));
  out->struct_size = size;
}

// Zeroes a caller's stats struct after a failure (guard cannot: it would
// overwrite struct_size and the bytes past an older struct).
kiln_status clear_stats_on_failure(kiln_status status, kiln_epoch_stats *out) {
  if (status != KILN_OK && out && out->struct_size >= sizeof(uint32_t)) {
    const uint32_t size = out->struct_size;
    std::memset(out, 0, std::min<size_t>(size, sizeof *out));
    out->struct_size = size;
  }
  return status;
}

}  // namespace

extern "C" {

KILN_API kiln_status kiln_loss(kiln_loss_kind kind, const kiln_tensor *pred, const kiln_tensor *target, double *out) {
  return guard([&] {
    kiln::Tensor p = value(pred, "pred"), t = value(target, "target");
    require(out, "out");
    *out = kiln::compute_loss(checked_enum(kind, KILN_LOSS_CROSS_ENTROPY, KILN_LOSS_BCE_WITH_LOGITS, "loss kind"), p, t);
  }, out);
}

KILN_API kiln_status kiln_trainer_options_create(kiln_trainer_options **out) {
  return guard([&] {
    require(out, "out");
    *out = kiln::api::make_handle<kiln_trainer_options>(std::make_shared<kiln::TrainerOptions>());
  }, out);
}

KILN_API void kiln_trainer_options_release(kiln_trainer_options *options) { kiln::api::release_handle(options); }

KILN_API kiln_status kiln_trainer_options_set_loss(kiln_trainer_options *options, kiln_loss_kind loss) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    o.loss = checked_enum(loss, KILN_LOSS_CROSS_ENTROPY, KILN_LOSS_BCE_WITH_LOGITS, "loss kind");
  });
}

KILN_API kiln_status kiln_trainer_options_set_optimizer(kiln_trainer_options *options, kiln_optimizer_kind kind) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    o.optimizer.kind = checked_enum(kind, KILN_OPTIM_SGD, KILN_OPTIM_ADAMW, "optimizer kind");
  });
}

KILN_API kiln_status kiln_trainer_options_set_lr(kiln_trainer_options *options, double lr) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    kiln::check(std::isfinite(lr) && lr >= 0, KILN_ERROR_INVALID_ARGUMENT, "lr must be >= 0, got " + std::to_string(lr));
    o.lr = lr;
  });
}

KILN_API kiln_status kiln_trainer_options_set_momentum(kiln_trainer_options *options, double momentum) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    kiln::check(std::isfinite(momentum) && momentum >= 0, KILN_ERROR_INVALID_ARGUMENT,
                "momentum must be >= 0, got " + std::to_string(momentum));
    o.optimizer.momentum = momentum;
  });
}

KILN_API kiln_status kiln_trainer_options_set_nesterov(kiln_trainer_options *options, int nesterov) {
  return guard([&] { options_of(options).optimizer.nesterov = nesterov != 0; });
}

KILN_API kiln_status kiln_trainer_options_set_weight_decay(kiln_trainer_options *options, double weight_decay) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    kiln::check(std::isfinite(weight_decay) && weight_decay >= 0, KILN_ERROR_INVALID_ARGUMENT,
                "weight decay must be >= 0, got " + std::to_string(weight_decay));
    o.optimizer.weight_decay = weight_decay;
    o.weight_decay_set = true;
  });
}

KILN_API kiln_status kiln_trainer_options_set_betas(kiln_trainer_options *options, double beta1, double beta2) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    kiln::check(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, KILN_ERROR_INVALID_ARGUMENT,
                "betas must be in [0, 1), got (" + std::to_string(beta1) + ", " + std::to_string(beta2) + ")");
    o.optimizer.beta1 = beta1;
    o.optimizer.beta2 = beta2;
  });
}

KILN_API kiln_status kiln_trainer_options_set_eps(kiln_trainer_options *options, double eps) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    kiln::check(std::isfinite(eps) && eps > 0, KILN_ERROR_INVALID_ARGUMENT, "eps must be > 0, got " + std::to_string(eps));
    o.optimizer.eps = eps;
  });
}

KILN_API kiln_status kiln_trainer_options_set_batch_size(kiln_trainer_options *options, int64_t batch_size) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    kiln::check(batch_size >= 1, KILN_ERROR_INVALID_ARGUMENT,
                "batch size must be >= 1, got " + std::to_string(batch_size));
    o.batch_size = batch_size;
  });
}

KILN_API kiln_status kiln_trainer_options_set_grad_clip(kiln_trainer_options *options, double max_norm) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    kiln::check(std::isfinite(max_norm) && max_norm >= 0, KILN_ERROR_INVALID_ARGUMENT,
                "max_norm must be >= 0 (0 = off), got " + std::to_string(max_norm));
    o.grad_clip = max_norm;
  });
}

KILN_API kiln_status kiln_trainer_options_set_schedule(kiln_trainer_options *options, kiln_lr_schedule schedule,
                                                       int64_t step_size, double gamma, int64_t total_steps,
                                                       double min_lr) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    kiln::ScheduleConfig c = o.schedule;
    c.kind = checked_enum(schedule, KILN_LR_CONSTANT, KILN_LR_COSINE, "lr schedule");
    c.step_size = step_size;
    c.gamma = gamma;
    c.total_steps = total_steps;
    c.min_lr = min_lr;
    kiln::check_schedule_config(c);
    o.schedule = c;
  });
}

KILN_API kiln_status kiln_trainer_options_set_warmup(kiln_trainer_options *options, int64_t steps) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    kiln::check(steps >= 0, KILN_ERROR_INVALID_ARGUMENT, "warmup steps must be >= 0, got " + std::to_string(steps));
    o.schedule.warmup = steps;
  });
}

KILN_API kiln_status kiln_trainer_options_set_shuffle_seed(kiln_trainer_options *options, uint64_t seed) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    o.shuffle_seed = seed;
    o.shuffle_seed_set = true;
  });
}

KILN_API kiln_status kiln_trainer_options_set_progress_interval(kiln_trainer_options *options, int64_t batches) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    kiln::check(batches >= 0, KILN_ERROR_INVALID_ARGUMENT,
                "the progress interval must be >= 0 batches, got " + std::to_string(batches));
    o.progress_interval = batches;
  });
}

KILN_API kiln_status kiln_trainer_options_set_precision(kiln_trainer_options *options, kiln_precision precision) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    o.precision = checked_enum(precision, KILN_PRECISION_FP32, KILN_PRECISION_BF16, "precision");
  });
}

KILN_API kiln_status kiln_trainer_options_set_fast_path(kiln_trainer_options *options, uint32_t enabled) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    kiln::check((enabled & ~uint32_t(KILN_FAST_PATH_ALL)) == 0, KILN_ERROR_INVALID_ARGUMENT,
                "fast path bits " + std::to_string(enabled) + " name parts that do not exist (KILN_FAST_PATH_ALL is " +
                    std::to_string(int(KILN_FAST_PATH_ALL)) + ")");
    o.fast_path = enabled;
  });
}

KILN_API kiln_status kiln_trainer_options_set_devices(kiln_trainer_options *options, const kiln_device *devices,
                                                      int64_t count) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    kiln::check(count >= 0 && count <= KILN_MAX_DATA_PARALLEL_DEVICES, KILN_ERROR_INVALID_ARGUMENT,
                "the device count must be in [0, " + std::to_string(KILN_MAX_DATA_PARALLEL_DEVICES) + "], got " +
                    std::to_string(count));
    if (count > 0) require(devices, "devices");
    std::vector<kiln::Device> list;
    for (int64_t i = 0; i < count; ++i) {
      const kiln::Device d = kiln::api::device(devices[i]);
      kiln::check(count == 1 || !d.is_cpu(), KILN_ERROR_INVALID_ARGUMENT,
                  "DataParallel replicas run on CUDA devices; cpu can only be listed alone");
      for (const kiln::Device &seen : list)
        kiln::check(seen != d, KILN_ERROR_INVALID_ARGUMENT, d.str() + " is listed twice");
      list.push_back(d);
    }
    o.devices = std::move(list);
  });
}

KILN_API kiln_status kiln_trainer_options_set_bucket_bytes(kiln_trainer_options *options, int64_t bytes) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    kiln::check(bytes >= 0, KILN_ERROR_INVALID_ARGUMENT,
                "the allreduce bucket size must be >= 0 bytes (0: one allreduce), got " + std::to_string(bytes));
    o.bucket_bytes = bytes;
  });
}

KILN_API kiln_status kiln_trainer_create(kiln_model *model, const kiln_trainer_options *options, kiln_trainer **out) {
  return guard([&] {
    std::shared_ptr<kiln::Model> m = value(model, "model");
    kiln::TrainerOptions o;
    if (options) o = *value(options, "options");
    require(out, "out");
    auto trainer = std::make_shared<kiln::DataParallel>(std::move(m), o);
    *out = kiln::api::make_handle<kiln_trainer>(std::move(trainer));
  }, out);
}

KILN_API void kiln_trainer_release(kiln_trainer *trainer) { kiln::api::release_handle(trainer); }

KILN_API kiln_status kiln_trainer_retain(kiln_trainer *trainer, kiln_trainer **out) {
  return kiln::api::retain_handle(trainer, "trainer", out);
}

KILN_API kiln_status kiln_trainer_step(kiln_trainer *trainer, const kiln_tensor *x, const kiln_tensor *y,
                                       double *loss) {
  return guard([&] {
    // A strong reference for the whole call: the progress callback may release
    // the trainer's handle.
    const std::shared_ptr<kiln::DataParallel> held = value(trainer, "trainer");
    kiln::DataParallel &t = *held;
    kiln::Tensor xt = value(x, "x"), yt = value(y, "y");
    const double l = t.step(xt, yt, loss != nullptr);
    if (loss) *loss = l;
  }, loss);
}

KILN_API kiln_status kiln_trainer_epoch(kiln_trainer *trainer, const kiln_dataset *dataset, kiln_epoch_stats *out) {
  return clear_stats_on_failure(guard([&] {
    // A strong reference for the whole call: the progress callback may release
    // the trainer's handle.
    const std::shared_ptr<kiln::DataParallel> held = value(trainer, "trainer");
    kiln::DataParallel &t = *held;
    std::shared_ptr<kiln::Dataset> ds = value(dataset, "dataset");
    check_stats_out(out);
    copy_stats(t.epoch(*ds), out);
  }), out);
}

KILN_API kiln_status kiln_trainer_fit(kiln_trainer *trainer, const kiln_dataset *train,
                                      const kiln_dataset *validation, int64_t epochs, kiln_progress_fn callback,
                                      void *user, kiln_history **out) {
  return guard([&] {
    // A strong reference for the whole call: the progress callback may release
    // the trainer's handle.
    const std::shared_ptr<kiln::DataParallel> held = value(trainer, "trainer");
    kiln::DataParallel &t = *held;
    std::shared_ptr<kiln::Dataset> tr = value(train, "train");
    std::shared_ptr<kiln::Dataset> va = validation ? value(validation, "validation") : nullptr;
    require(out, "out");
    std::shared_ptr<kiln::History> history = t.fit(*tr, va.get(), epochs, callback, user);
    *out = kiln::api::make_handle<kiln_history>(std::move(history));
  }, out);
}

KILN_API kiln_status kiln_trainer_evaluate(kiln_trainer *trainer, const kiln_dataset *dataset, double *loss,
                                           double *accuracy) {
  return guard([&] {
    // A strong reference for the whole call: the progress callback may release
    // the trainer's handle.
    const std::shared_ptr<kiln::DataParallel> held = value(trainer, "trainer");
    kiln::DataParallel &t = *held;
    std::shared_ptr<kiln::Dataset> ds = value(dataset, "dataset");
    double l = 0, a = 0;
    t.evaluate(*ds, &l, &a);
    if (loss) *loss = l;
    if (accuracy) *accuracy = a;
  }, loss, accuracy);
}

KILN_API kiln_status kiln_trainer_epochs_done(const kiln_trainer *trainer, int64_t *out) {
  return query(trainer, "trainer", out, [](const auto &t) { return t->epochs_done(); });
}

KILN_API kiln_status kiln_trainer_steps_done(const kiln_trainer *trainer, int64_t *out) {
  return query(trainer, "trainer", out, [](const auto &t) { return t->steps_done(); });
}

KILN_API kiln_status kiln_trainer_current_lr(const kiln_trainer *trainer, double *out) {
  return query(trainer, "trainer", out, [](const auto &t) { return t->current_lr(); });
}

KILN_API kiln_status kiln_trainer_save_checkpoint(const kiln_trainer *trainer, const char *path) {
  return guard([&] {
    const std::shared_ptr<kiln::DataParallel> held = value(trainer, "trainer");
    const kiln::DataParallel &t = *held;
    require(path, "path");
    t.save_checkpoint(path);
  });
}

KILN_API kiln_status kiln_trainer_load_checkpoint(kiln_trainer *trainer, const char *path) {
  return guard([&] {
    // A strong reference for the whole call: the progress callback may release
    // the trainer's handle.
    const std::shared_ptr<kiln::DataParallel> held = value(trainer, "trainer");
    kiln::DataParallel &t = *held;
    require(path, "path");
    t.load_checkpoint(path);
  });
}

KILN_API void kiln_history_release(kiln_history *history) { kiln::api::release_handle(history); }

KILN_API kiln_status kiln_history_retain(kiln_history *history, kiln_history **out) {
  return kiln::api::retain_handle(history, "history", out);
}

KILN_API kiln_status kiln_history_size(const kiln_history *history, int64_t *out) {
  return query(history, "history", out, [](const auto &h) { return int64_t(h->epochs.size()); });
}

KILN_API kiln_status kiln_history_get(const kiln_history *history, int64_t index, kiln_epoch_stats *out) {
  return clear_stats_on_failure(guard([&] {
    std::shared_ptr<kiln::History> h = value(history, "history");
    check_stats_out(out);
    const int64_t n = int64_t(h->epochs.size());
    kiln::check(index >= 0 && index < n, KILN_ERROR_INVALID_ARGUMENT,
                "epoch index " + std::to_string(index) + " is out of range: the history has " + std::to_string(n) +
                    " epochs");
    copy_stats(h->epochs[size_t(index)], out);
  }), out);
}

}  // extern "C"
