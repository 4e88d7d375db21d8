// C entry points: losses, trainer options, trainers, histories.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

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

// A caller's setter argument as the options take it: an enum as the int its
// bytes hold (a C caller may pass any int, and loading an out-of-range value
// as the C++ enum type would be undefined behaviour: see checked_enum), any
// other type as it is.
template <class T> auto raw_argument(const T &value) {
  if constexpr (std::is_enum_v<T>) {
    static_assert(sizeof(T) == sizeof(int), "C enums are int-sized here");
    int raw;
    std::memcpy(&raw, &value, sizeof raw);
    return raw;
  } else {
    return value;
  }
}

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

// The setters of one value, one per KILN_OPTION row of the table: the value
// (a parameter named as the option) is checked against its row
// (train/options.cpp) and stored.
#define KILN_OPTION(id, setter, kind, ctype, ...)                                         \
  KILN_API kiln_status kiln_trainer_options_set_##id(kiln_trainer_options *options, ctype id) { \
    return guard([&] { kiln::set_option(options_of(options), kiln::Option::id, raw_argument(id)); }); \
  }
#define KILN_OPTION_CUSTOM(...)
#include "train/options_table.h"

// The setters of several rows at once.
KILN_API kiln_status kiln_trainer_options_set_betas(kiln_trainer_options *options, double beta1, double beta2) {
  return guard([&] { kiln::set_betas(options_of(options), beta1, beta2); });
}

KILN_API kiln_status kiln_trainer_options_set_schedule(kiln_trainer_options *options, kiln_lr_schedule schedule,
                                                       int64_t step_size, double gamma, int64_t total_steps,
                                                       double min_lr) {
  return guard([&] {
    kiln::set_schedule(options_of(options), raw_argument(schedule), step_size, gamma, total_steps, min_lr);
  });
}

KILN_API kiln_status kiln_trainer_options_set_devices(kiln_trainer_options *options, const kiln_device *devices,
                                                      int64_t count) {
  return guard([&] {
    kiln::TrainerOptions &o = options_of(options);
    kiln::check_option(kiln::Option::devices, double(count), o.schedule);
    if (count > 0) require(devices, "devices");
    std::vector<kiln::Device> list;
    for (int64_t i = 0; i < count; ++i) list.push_back(kiln::api::device(devices[i]));
    kiln::set_devices(o, std::move(list));
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
