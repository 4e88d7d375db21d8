// Trainer: runs optimisation steps, epochs and fits of one model on the
// device the model had when the trainer was created. The loop lives here;
// its parts have rooms of their own:
//
//  - train/options.hpp: the settings, declared once in options_table.h;
//  - train/step_builder.hpp: the step program of a batch shape (gather,
//    forward, loss, backward, gradient reduction, clipping, update), built
//    from the model, the settings and this trainer's buffers;
//  - train/program_cache.hpp: the compiled programs, keyed on everything a
//    program depends on (the data source by value and identity, so no
//    program runs for data it was not built for);
//  - train/shard_plan.hpp: which samples of a pass this rank takes.
//
// The trainer drives programs, not kernels: the model's device compiles each
// (Backend::compile) and the trainer runs it for a whole epoch, or a
// progress interval, at a time. The per-step values (learning rate,
// optimizer step, dropout seed, batch offset) go into a StepParams table on
// the device, written once per epoch (or once per 256 caller steps) ahead of
// the steps that read it. Every buffer is allocated once per batch size or
// dataset size and reused, so steps allocate nothing, and nothing is read
// back from the device except where a caller asks for it (a step's loss,
// progress reports, an epoch's end).
//
// Determinism: each epoch's order is Backend::shuffle's permutation for a
// seed drawn from the trainer's counter-based generator (seed from the
// options, else derived from the context): the same on every device. Dropout
// masks are keyed on (that seed, step), so a seed gives the same run every
// time, and a checkpoint (which stores the generator's position and the
// counters) resumes it exactly.
//
// Precision: fp32 computes in the model's dtype; tf32 (CUDA only) runs f32
// products on TF32 tensor cores; bf16 is mixed precision: the batch,
// activations and products in bf16, with f32 master weights, gradients,
// optimizer state and loss (PyTorch's autocast semantics: the weight
// gradients are the bf16 products', accumulated into f32).
//
// Distributed data parallel (attach): every rank runs its own trainer on its
// own copy of the model and the whole dataset, takes its shard of each
// pass's shared shuffled order (ShardPlan), and every step averages the
// gradients over the ranks before clipping and the update. The batch size is
// per rank, as it is per device in DataParallel: N ranks with batch b train
// like batch N*b in one process. Evaluation shards without padding, and
// every metric is reduced over the ranks.
//
// Used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/collective.hpp"
#include "nn/model.hpp"
#include "nn/optimizer.hpp"
#include "nn/schedule.hpp"
#include "train/dataset.hpp"
#include "train/history.hpp"
#include "train/options.hpp"
#include "train/program_cache.hpp"
#include "train/shard_plan.hpp"
#include "train/step_builder.hpp"

namespace kiln {

// Marks a trainer busy for one public call (busy is its flag): calls into
// it from inside (its progress callback) get KILN_ERROR_BUSY instead of
// corrupting the running pass. `what` names the call refused.
class BusyScope {
 public:
  BusyScope(bool &busy, const char *what);
  ~BusyScope() { busy_ = false; }
  BusyScope(const BusyScope &) = delete;
  BusyScope &operator=(const BusyScope &) = delete;

 private:
  bool &busy_;
};

// INVALID_ARGUMENT, naming the sample, unless every label of y (host
// memory, an integer dtype) is in [0, classes).
void check_host_labels(const Tensor &y, int64_t classes);

// Steps, epochs and updates stay below this (~10^18): the trainer adds to
// them as int64, and a checkpoint's must leave room to count on (kiln.h's
// "Limits").
constexpr int64_t kCounterLimit = int64_t(1) << 62;

// An epoch after `batches` of its batches, over `samples` samples in
// batches of `batch`, shuffled by shuffle number `shuffle`, with this
// rank's statistics so far.
struct EpochPosition {
  int64_t batches = 0, samples = 0, batch = 0;
  uint64_t shuffle = 0;
  PassStats so_far;
};

class Trainer {
 public:
  // Validates options (check_options: INVALID_ARGUMENT naming the value).
  Trainer(std::shared_ptr<Model> model, const TrainerOptions &options);

  // One step on x [B, in] and y (labels [B] or targets [B, K]) from any
  // device. Returns the batch's mean loss when want_loss, else 0 without
  // waiting for the device.
  double step(const Tensor &x, const Tensor &y, bool want_loss);
  // One shuffled pass over dataset (no validation).
  kiln_epoch_stats epoch(const Dataset &dataset);
  // callback may be null. CANCELLED when it returns non-zero.
  std::shared_ptr<History> fit(const Dataset &train, const Dataset *validation, int64_t epochs,
                               kiln_progress_fn callback, void *user);
  // Mean loss and accuracy (0 for float targets) in evaluation mode.
  void evaluate(const Dataset &dataset, double *loss, double *accuracy);
  // step, epoch, fit, evaluate and load_checkpoint throw BUSY when called
  // from inside another of them (a progress callback); fit and epoch throw
  // NUMERIC, with the epoch's figures, when an epoch's loss is not finite.

  // Makes this trainer one rank of distributed data parallel training over
  // comm (see the top of this file). Collective: every rank calls it, with
  // the same model spec, dtype and options (else INVALID_ARGUMENT on every
  // rank, naming the ranks that differ: a hash of them is compared). The
  // weights, optimizer state and counters then take rank 0's. NOT_SUPPORTED
  // when comm cannot reach buffers of the trainer's device.
  void attach(std::shared_ptr<Collective> comm);
  const std::shared_ptr<Collective> &communicator() const { return comm_; }
  // Collective over comm (this trainer's, or the one attach is taking):
  // every rank's parameters become rank 0's.
  void broadcast_parameters(Collective &comm);

  int64_t epochs_done() const { return epochs_done_; }
  int64_t steps_done() const { return steps_done_; }
  double current_lr() const;

  // train/checkpoint.cpp. save_checkpoint is collective with a
  // communicator (rank 0 writes, every rank returns its outcome);
  // write_checkpoint writes this rank's state, whatever the others do.
  void save_checkpoint(const std::string &path) const;
  void write_checkpoint(const std::string &path) const;
  void load_checkpoint(const std::string &path);

 private:
  // Caller steps written into the step table at once.
  static constexpr int64_t kStepWindow = 256;

  // Throws INVALID_ARGUMENT when the model left the trainer's device.
  void check_model_device() const;
  // INVALID_ARGUMENT unless `steps` more steps and one more epoch stay
  // below kCounterLimit.
  void check_counters(int64_t steps) const;
  // The rows of an epoch's batches over ds (the last may have fewer), and
  // its steps: this rank's batches.
  int64_t epoch_batch(const Dataset &ds) const;
  int64_t batches_per_epoch(const Dataset &ds) const;
  // Checks the dataset against the model and the loss.
  void check_dataset(const Dataset &dataset, const char *what) const;
  // (Re)allocates the workspace and batch buffers for batches of up to rows.
  void ensure_capacity(int64_t rows);
  // Grows the order buffers to n samples and the step table to n entries.
  void ensure_order(int64_t n);
  // After a buffer was allocated anew: the next buffer generation, whose
  // programs are built over the new buffers (the old ones' are forgotten).
  void buffers_changed();
  // Copies src (x or y, any device and dtype) into buf's first rows.
  void stage(const Tensor &src, const Tensor &buf, int64_t rows);
  // The program for (trains, training, rows, source): from the cache, else
  // built and compiled. source null: the caller's batch staged in batch_x_.
  Executable &program(bool trains, bool training, int64_t rows, const SourceView *source);
  // Writes table entries [0, count) for steps steps_done_ - done + i (done:
  // the steps of the pass already taken), batch offsets i * batch, and
  // copies them to the device.
  void write_table(int64_t count, int64_t batch, int64_t done = 0);
  // The device order of this rank's share of one pass over ds (shuffled by
  // the shuffle numbered *shuffle, or in sample order when it is null;
  // shards_.count(ds.size(), pad) samples), mapped to rows of the data for
  // a split.
  void pass_order(const Dataset &ds, const Dataset::GatherSource &source, const uint64_t *shuffle, bool pad);
  // The batches of resume_ when the next epoch over ds takes it up: ds of
  // the size and batch it was written for; else 0.
  int64_t resumed_batches(const Dataset &ds) const;
  // Sums the pass statistics over the ranks (no-op without a communicator).
  void reduce_stats(PassStats &stats) const;
  // INVALID_ARGUMENT on every rank unless every rank passed a dataset of the
  // same size (no-op without a communicator). Collective.
  void check_same_size(const Dataset &ds, const char *what) const;
  // Runs steps [first, first + count) of a pass of `batches` batches of
  // `batch` rows over n samples (the last one may be smaller).
  void run_pass_steps(bool trains, int64_t first, int64_t count, int64_t n, int64_t batch, const SourceView &source);
  // One pass; epoch_index (1-based) and epochs only label progress reports.
  kiln_epoch_stats run_epoch(const Dataset &dataset, int64_t epoch_index, int64_t epochs, kiln_progress_fn callback,
                             void *user);
  // evaluate without the busy check (fit's validation).
  void evaluate_pass(const Dataset &dataset, double *loss, double *accuracy);
  // Zeroes, reads back or sets the statistics at offset (offsetof(StepStats,
  // pass) or step).
  void clear_stats(size_t offset);
  PassStats read_stats(size_t offset) const;
  void write_stats(size_t offset, const PassStats &stats);

  // Throws NUMERIC when an epoch's mean loss is not finite.
  void check_finite(const kiln_epoch_stats &s) const;

  std::shared_ptr<Model> model_;
  TrainerOptions options_;
  bool busy_ = false;
  Device device_;
  StepConfig config_;
  Optimizer optimizer_;
  ScheduleConfig schedule_;

  // The buffers programs read and write (step_buffers_ names them for the
  // step builder).
  Tensor grads_;                 // flat, the model's layout and dtype; gaps stay zero
  Tensor lp_params_, lp_grads_;  // bf16 copies of the flat buffers (mixed precision only)
  Tensor stats_;                 // a StepStats block of F64 on the device
  Workspace ws_;
  Tensor batch_x_, batch_y_;     // [capacity, in] work dtype; labels i64 [capacity] or targets [capacity, K]
  Tensor logits32_, dlogits32_;  // f32 logits and their gradient for the loss (mixed precision only)
  int64_t capacity_ = 0;
  Tensor order_device_, rows_device_;  // I64 [n]: the pass's sample order, and it mapped to data rows
  Tensor table_;                       // StepParams [table_entries_] on the device (stored as bytes)
  int64_t table_entries_ = 0;
  std::vector<StepParams> table_host_;
  StepBuffers step_buffers_;
  ProgramCache programs_;

  std::shared_ptr<Collective> comm_;  // null: one process
  ShardPlan shards_;                  // rank 0 of 1 without a communicator
  Tensor shard_positions_;            // I64: this rank's positions in the pass order (distributed only)
  int64_t shard_n_ = -1;              // the pass size and padding shard_positions_ was built for
  bool shard_pad_ = false;

  // The caller-step window: table entries [0, kStepWindow) hold steps
  // window_first_.. under these counters; any other use of the table clears it.
  bool window_valid_ = false;
  int64_t window_first_ = 0, window_opt_steps_ = 0, window_fit_end_ = 0;
  uint64_t rng_seed_ = 0, rng_counter_ = 0;  // rng_counter_: shuffles drawn
  // Where an epoch stands between two of its batches: in_epoch_ while
  // run_epoch's progress callback runs (what a checkpoint written there
  // records), resume_ after loading such a checkpoint (where the next epoch
  // over the same data picks up; dropped by a step, or once an epoch took
  // it or started without it). batches == 0: no position.
  EpochPosition in_epoch_, resume_;
  int64_t steps_done_ = 0, epochs_done_ = 0;
  int64_t fit_end_ = 0;  // steps_done at the end of the running fit; 0 outside fit
};

}  // namespace kiln
