#include "train/options.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "core/error.hpp"
#include "core/number_text.hpp"

namespace kiln {

namespace {

constexpr OptionInfo kInfo[] = {
#define KILN_OPTION(id, setter, kind, ctype, dflt, lo, hi, flags, names, ...) \
  {#id, OptionKind::kind, double(lo), double(hi), flags, names},
#include "train/options_table.h"
};
static_assert(sizeof kInfo / sizeof kInfo[0] == size_t(kOptionCount), "one OptionInfo per row");

// A bound as the table would print it: integers without a fraction.
std::string bound_text(double v) {
  char text[40];
  std::snprintf(text, sizeof text, "%.15g", v);
  return text;
}

// "is >= 0", "is in [0, 1)", "is one of sgd, adam, adamw": what a value of
// the row must be.
std::string range_text(const OptionInfo &info) {
  if (info.kind == OptionKind::ENUM) {
    std::string names = info.names;
    for (size_t bar = names.find('|'); bar != std::string::npos; bar = names.find('|')) names.replace(bar, 1, ", ");
    return "one of " + names;
  }
  if (info.kind == OptionKind::BITS) return "a mask within " + bound_text(info.hi);
  const bool lo_open = info.flags & KILN_OPTION_LO_OPEN, hi_open = info.flags & KILN_OPTION_HI_OPEN;
  if (std::isinf(info.hi)) return std::string(lo_open ? "> " : ">= ") + bound_text(info.lo);
  return std::string("in ") + (lo_open ? "(" : "[") + bound_text(info.lo) + ", " + bound_text(info.hi) +
         (hi_open ? ")" : "]");
}

bool in_range(const OptionInfo &info, double v) {
  if (info.kind == OptionKind::BITS) return v >= 0 && (uint64_t(v) & ~uint64_t(info.hi)) == 0;
  if (info.kind == OptionKind::DOUBLE && !std::isfinite(v)) return false;
  if (info.kind == OptionKind::ENUM && v != std::floor(v)) return false;
  const bool lo_ok = info.flags & KILN_OPTION_LO_OPEN ? v > info.lo : v >= info.lo;
  const bool hi_ok = info.flags & KILN_OPTION_HI_OPEN ? v < info.hi : v <= info.hi;
  return lo_ok && hi_ok;
}

}  // namespace

void check_option(Option id, double v, kiln_lr_schedule schedule) {
  const OptionInfo &info = option_info(id);
  if (info.kind == OptionKind::UINT || info.kind == OptionKind::BOOL) return;  // every value is one
  if ((info.flags & KILN_OPTION_STEP_SCHEDULE) && schedule != KILN_LR_STEP) return;
  if (in_range(info, v)) return;
  const std::string got = info.kind == OptionKind::DOUBLE ? number_text(v) : bound_text(v);
  fail(KILN_ERROR_INVALID_ARGUMENT, std::string(info.name) + " must be " + range_text(info) + ", got " + got +
                                        ((info.flags & KILN_OPTION_STEP_SCHEDULE) ? " (with the step schedule)" : ""));
}

namespace {

template <class T> double as_number(const T &v) {
  if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) return double(v);
  else return double(v.size());  // devices: the count
}

// Stores value into an option's field (the table's field column), which has
// the value's type or a wider one. Fields of another kind (devices) are
// never passed a number: their setter is their own.
template <class F, class T> void store(F &field, T value) {
  if constexpr (std::is_same_v<F, bool>) field = value != 0;
  else if constexpr (std::is_arithmetic_v<F> || std::is_enum_v<F>) field = static_cast<F>(value);
  else fail(KILN_ERROR_INTERNAL, "option field does not take a number");
}

template <class T> void set_number(TrainerOptions &o, Option id, T value) {
  check_option(id, double(value), o.schedule);
  switch (id) {
#define KILN_OPTION(id, ...) \
  case Option::id:           \
    store(o.id, value);      \
    break;
#include "train/options_table.h"
  }
  o.given.set(size_t(id));
}

// An enumerator's name: the names column's value-th entry.
std::string enum_name(const OptionInfo &info, int64_t value) {
  const char *p = info.names;
  for (int64_t i = 0; i < value && p; ++i) {
    p = std::strchr(p, '|');
    if (p) ++p;
  }
  if (!p || value < 0) return std::to_string(value);
  const char *end = std::strchr(p, '|');
  return std::string(p, end ? size_t(end - p) : std::strlen(p));
}

template <class T> std::string value_text(const OptionInfo &info, const T &v) {
  if constexpr (std::is_same_v<T, std::vector<Device>>) {
    std::string text;
    for (const Device &d : v) text += (text.empty() ? "" : ",") + d.str();
    return text.empty() ? "none" : text;
  } else if constexpr (std::is_same_v<T, double>) {
    return number_text(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? "1" : "0";
  } else if constexpr (std::is_enum_v<T>) {
    return enum_name(info, int64_t(v));
  } else {
    return std::to_string(v);
  }
}

}  // namespace

const OptionInfo &option_info(Option id) { return kInfo[int(id)]; }

TrainerOptions::TrainerOptions() {
#define KILN_OPTION(id, setter, kind, ctype, dflt, ...) \
  if constexpr (OptionKind::kind != OptionKind::DEVICES) store(id, dflt);
#include "train/options_table.h"
}

TrainerOptions TrainerOptions::resolved() const {
  TrainerOptions r = *this;
  if (!is_set(Option::weight_decay)) {
    r.weight_decay = optimizer == KILN_OPTIM_ADAMW ? 0.01 : 0.0;  // torch.optim's defaults
    r.given.set(size_t(Option::weight_decay));
  }
  return r;
}

OptimizerConfig TrainerOptions::optimizer_config() const {
  const TrainerOptions r = resolved();
  OptimizerConfig c;
  c.kind = r.optimizer;
  c.momentum = r.momentum;
  c.nesterov = r.nesterov;
  c.weight_decay = r.weight_decay;
  c.beta1 = r.beta1, c.beta2 = r.beta2, c.eps = r.eps;
  return c;
}

ScheduleConfig TrainerOptions::schedule_config() const {
  ScheduleConfig c;
  c.kind = schedule;
  c.step_size = step_size;
  c.gamma = gamma;
  c.total_steps = total_steps;
  c.min_lr = min_lr;
  c.warmup = warmup;
  return c;
}

void set_option(TrainerOptions &o, Option id, double value) { set_number(o, id, value); }
void set_option(TrainerOptions &o, Option id, int64_t value) { set_number(o, id, value); }
void set_option(TrainerOptions &o, Option id, uint64_t value) { set_number(o, id, value); }
void set_option(TrainerOptions &o, Option id, int value) { set_number(o, id, value); }
void set_option(TrainerOptions &o, Option id, uint32_t value) { set_number(o, id, value); }

void set_betas(TrainerOptions &o, double beta1, double beta2) {
  check_option(Option::beta1, beta1, o.schedule);
  check_option(Option::beta2, beta2, o.schedule);
  set_option(o, Option::beta1, beta1);
  set_option(o, Option::beta2, beta2);
}

void set_schedule(TrainerOptions &o, int kind_value, int64_t step_size, double gamma, int64_t total_steps,
                  double min_lr) {
  check_option(Option::schedule, double(kind_value), KILN_LR_CONSTANT);
  const auto kind = static_cast<kiln_lr_schedule>(kind_value);  // an enumerator now
  check_option(Option::step_size, double(step_size), kind);
  check_option(Option::gamma, gamma, kind);
  check_option(Option::total_steps, double(total_steps), kind);
  check_option(Option::min_lr, min_lr, kind);
  o.schedule = kind;
  o.step_size = step_size;
  o.gamma = gamma;
  o.total_steps = total_steps;
  o.min_lr = min_lr;
  for (Option id : {Option::schedule, Option::step_size, Option::gamma, Option::total_steps, Option::min_lr})
    o.given.set(size_t(id));
}

void set_devices(TrainerOptions &o, std::vector<Device> devices) {
  check_option(Option::devices, double(devices.size()), o.schedule);
  for (size_t i = 0; i < devices.size(); ++i) {
    check(devices.size() == 1 || !devices[i].is_cpu(), KILN_ERROR_INVALID_ARGUMENT,
          "DataParallel replicas run on CUDA devices; cpu can only be listed alone");
    for (size_t j = 0; j < i; ++j)
      check(devices[j] != devices[i], KILN_ERROR_INVALID_ARGUMENT, devices[i].str() + " is listed twice");
  }
  o.devices = std::move(devices);
  o.given.set(size_t(Option::devices));
}

void check_options(const TrainerOptions &o) {
#define KILN_OPTION(id, ...) check_option(Option::id, as_number(o.id), o.schedule);
#include "train/options_table.h"
}

std::string option_text(const TrainerOptions &o, Option id) {
  const OptionInfo &info = option_info(id);
  if ((info.flags & KILN_OPTION_DEFAULT_VARIES) && !o.is_set(id)) return "default";
  switch (id) {
#define KILN_OPTION(id, ...) \
  case Option::id:           \
    return value_text(info, o.id);
#include "train/options_table.h"
  }
  return "?";
}

std::vector<std::pair<std::string, std::string>> agreed_options(const TrainerOptions &o) {
  const TrainerOptions r = o.resolved();
  std::vector<std::pair<std::string, std::string>> agreed;
  for (int i = 0; i < kOptionCount; ++i)
    if (kInfo[i].flags & KILN_OPTION_RANKS_AGREE) agreed.emplace_back(kInfo[i].name, option_text(r, Option(i)));
  return agreed;
}

}  // namespace kiln
