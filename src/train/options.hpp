// TrainerOptions: a trainer's settings, each declared once in
// train/options_table.h with its type, default, range, whether data-parallel
// ranks must agree on it and whether checkpoints keep it. Everything here is
// derived from that table: the defaults, the checks, the text of a value, the
// fingerprint ranks compare.
#pragma once

#include <bitset>
#include <cmath>  // INFINITY, for the table
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/device.hpp"
#include "kiln/kiln.h"
#include "nn/optimizer.hpp"
#include "nn/schedule.hpp"

namespace kiln {

// One per row of the table, in its order.
enum class Option : int {
#define KILN_OPTION(id, ...) id,
#include "train/options_table.h"
};
constexpr int kOptionCount = 0
#define KILN_OPTION(...) +1
#include "train/options_table.h"
    ;

enum class OptionKind { DOUBLE, INT, UINT, BOOL, ENUM, BITS, DEVICES };

// What the library's checks and texts need of a row of the table.
struct OptionInfo {
  const char *name;
  OptionKind kind;
  double lo, hi;
  int flags;          // KILN_OPTION_*
  const char *names;  // ENUM: "sgd|adam|adamw"
};
const OptionInfo &option_info(Option id);

// How TrainerOptions keeps an option of a kind (the ctype for ENUM).
template <OptionKind K, class CType> struct OptionStorage { using type = CType; };
template <class CType> struct OptionStorage<OptionKind::DOUBLE, CType> { using type = double; };
template <class CType> struct OptionStorage<OptionKind::INT, CType> { using type = int64_t; };
template <class CType> struct OptionStorage<OptionKind::UINT, CType> { using type = uint64_t; };
template <class CType> struct OptionStorage<OptionKind::BOOL, CType> { using type = bool; };
template <class CType> struct OptionStorage<OptionKind::BITS, CType> { using type = uint32_t; };
template <class CType> struct OptionStorage<OptionKind::DEVICES, CType> { using type = std::vector<Device>; };

// One member per row of the table, named by its id: loss, optimizer, lr,
// momentum, ..., batch_size (per device: the rows each replica or rank
// computes per step), devices (DataParallel's; empty: the model's device),
// bucket_bytes (train/gradient_reduce.hpp).
struct TrainerOptions {
  // Every option at the table's default, none set.
  TrainerOptions();

#define KILN_OPTION(id, setter, kind, ctype, ...) typename OptionStorage<OptionKind::kind, ctype>::type id;
#include "train/options_table.h"

  // The options a setter was called for: an unset KILN_OPTION_DEFAULT_VARIES
  // option takes its value from elsewhere (weight decay from the optimizer,
  // the shuffle seed from the context).
  std::bitset<kOptionCount> given;
  bool is_set(Option id) const { return given.test(size_t(id)); }

  // These options with the values that depend on others filled in: weight
  // decay from the optimizer kind (torch.optim's defaults) when unset.
  TrainerOptions resolved() const;
  // The optimizer's and the schedule's options, as nn/ takes them (the
  // optimizer's resolved).
  OptimizerConfig optimizer_config() const;
  ScheduleConfig schedule_config() const;
};

// INVALID_ARGUMENT, naming the option, its range and v, unless v is in option
// id's range (a count for devices). The range of a KILN_OPTION_STEP_SCHEDULE
// row holds only when schedule is the step schedule.
void check_option(Option id, double v, kiln_lr_schedule schedule);

// Sets option id to value after checking it against its row (INVALID_ARGUMENT
// naming the option, its range and the value; o unchanged then), and marks it
// set. value has the setter's parameter type (the row's ctype), an enum as
// its int.
void set_option(TrainerOptions &o, Option id, double value);
void set_option(TrainerOptions &o, Option id, int64_t value);
void set_option(TrainerOptions &o, Option id, uint64_t value);
void set_option(TrainerOptions &o, Option id, int value);
void set_option(TrainerOptions &o, Option id, uint32_t value);
// The setters of several rows at once: every value is checked before any is
// stored.
void set_betas(TrainerOptions &o, double beta1, double beta2);
void set_schedule(TrainerOptions &o, int kind, int64_t step_size, double gamma, int64_t total_steps, double min_lr);
void set_devices(TrainerOptions &o, std::vector<Device> devices);

// Checks every option of o against the table, as the setters do: for
// options built in C++ rather than through the setters.
void check_options(const TrainerOptions &o);

// The options data-parallel ranks must agree on (KILN_OPTION_RANKS_AGREE),
// in table order, each as its name and the option_text of o.resolved().
std::vector<std::pair<std::string, std::string>> agreed_options(const TrainerOptions &o);

// The value of option id as exact text: an enumerator's name, a double that
// reads back to the same bits (number_text), an integer in decimal, devices as
// "cuda:0,cuda:1"; "default" for an unset KILN_OPTION_DEFAULT_VARIES option.
std::string option_text(const TrainerOptions &o, Option id);

}  // namespace kiln
