// Trainer: runs optimisation steps, epochs and fits of one model on the
// device the model had when the trainer was created.
//
// The trainer drives step programs (core/program.hpp), not kernels. It
// builds, once per (batch rows, data source, training or evaluation), a
// program: gather the batch, (cast the weights for mixed precision), the
// model's forward ops, the loss (which writes the gradient of the mean loss
// w.r.t. the logits in the same pass), the backward ops into one flat
// gradient buffer, optional clipping, one optimizer update. The model's
// device compiles it (Backend::compile) and the trainer runs it for a whole
// epoch, or a progress interval, at a time. The per-step values (learning
// rate, optimizer step, dropout seed, batch offset) go into a StepParams
// table on the device, written once per epoch (or once per 256 caller steps)
// ahead of the steps that read it. Every buffer is allocated once per batch
// size or dataset size and reused, so steps allocate nothing, and nothing is
// read back from the device except where a caller asks for it (a step's
// loss, progress reports, an epoch's end).
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
// Distributed data parallel (attach): every rank runs its own trainer on
// its own copy of the model and the whole dataset; each epoch, rank r of N
// trains on positions r, r + N, r + 2N, ... of the shared shuffled order
// (PyTorch's DistributedSampler; the order is padded by wrapping around to a
// multiple of N, so every rank runs the same number of steps), and every
// step averages the gradients over the ranks (one allreduce over the flat
// gradient buffer, or one per bucket of bucket_bytes started during the
// backward: train/gradient_reduce.hpp) before clipping and the update.
// Batch b on N ranks hence trains like batch N*b in one process. Evaluation
// shards the same way without padding, and every metric is reduced over the
// ranks.
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
  // A compiled program and what it was built for.
  struct Program {
    bool trains = false, training = false;
    int64_t rows = 0;
    const void *source = nullptr;  // the dataset's resident x; null: the staged caller batch
    std::unique_ptr<Executable> exe;
  };

  // Throws INVALID_ARGUMENT when the model left the trainer's device.
  void check_model_device() const;
  // Checks the dataset against the model and the loss.
  void check_dataset(const Dataset &dataset, const char *what) const;
  // (Re)allocates the workspace and batch buffers for batches of up to rows
  // (forgetting the programs that used the old ones).
  void ensure_capacity(int64_t rows);
  // Grows the order buffers to n samples and the step table to n entries.
  void ensure_order(int64_t n);
  // Copies src (x or y, any device and dtype) into buf's first rows.
  void stage(const Tensor &src, const Tensor &buf, int64_t rows);
  // The program for (trains, training, rows, source): from the cache, else
  // built and compiled. source null: the caller's batch staged in batch_x_.
  Executable &program(bool trains, bool training, int64_t rows, const Dataset::GatherSource *source);
  // Writes table entries [0, count) for steps steps_done_ + i, batch offsets
  // i * batch, and copies them to the device.
  void write_table(int64_t count, int64_t batch);
  // The samples of a pass over n samples this rank takes: all of them
  // without a communicator; else its share of positions r, r + N, ...,
  // padded to ceil(n / N) by wrapping around when pad (training: every rank
  // must run the same steps), not padded otherwise (evaluation).
  int64_t local_count(int64_t n, bool pad) const;
  // The device order of this rank's share of one pass over ds (shuffled or
  // in sample order; local_count(ds.size(), pad) samples), mapped to rows of
  // the data for a split; returns its first element.
  const int64_t *pass_order(const Dataset &ds, const Dataset::GatherSource &source, bool shuffle, bool pad);
  // Sums the pass statistics over the ranks (no-op without a communicator).
  void reduce_stats(double stats[3]) const;
  // INVALID_ARGUMENT on every rank unless every rank passed a dataset of the
  // same size (no-op without a communicator). Collective.
  void check_same_size(const Dataset &ds, const char *what) const;
  // Runs steps [first, first + count) of a pass of `batches` batches of
  // `batch` rows over n samples (the last one may be smaller).
  void run_pass_steps(bool trains, int64_t first, int64_t count, int64_t n, int64_t batch,
                      const Dataset::GatherSource &source);
  // One pass; epoch_index (1-based) and epochs only label progress reports.
  kiln_epoch_stats run_epoch(const Dataset &dataset, int64_t epoch_index, int64_t epochs, kiln_progress_fn callback,
                             void *user);
  // evaluate without the busy check (fit's validation).
  void evaluate_pass(const Dataset &dataset, double *loss, double *accuracy);
  // Reads the three pass statistics (loss sum, correct, bad labels) at offset.
  void read_stats(int64_t offset, double out[3]) const;

  // Throws NUMERIC when an epoch's mean loss is not finite.
  void check_finite(const kiln_epoch_stats &s) const;

  std::shared_ptr<Model> model_;
  TrainerOptions options_;
  bool busy_ = false;
  Device device_;
  DType work_dtype_;  // the step's activations and products: the model's dtype, or bf16
  MathMode math_;
  Optimizer optimizer_;
  ScheduleConfig schedule_;
  Tensor grads_;  // flat, the model's layout and dtype; gaps stay zero
  Tensor lp_params_, lp_grads_;  // bf16 copies of the flat buffers (mixed precision only)
  Tensor stats_;  // F64 device accumulators (see kStats* in trainer.cpp)
  Workspace ws_;
  Tensor batch_x_, batch_y_;  // [capacity, in] work dtype; labels i64 [capacity] or targets [capacity, K]
  Tensor logits32_, dlogits32_;  // f32 logits and their gradient for the loss (mixed precision only)
  int64_t capacity_ = 0;
  Tensor order_device_, rows_device_;  // I64 [n]: the pass's sample order, and it mapped to data rows
  std::shared_ptr<Collective> comm_;   // null: one process
  Tensor shard_positions_;             // I64: this rank's positions in the pass order (distributed only)
  int64_t shard_n_ = -1;               // the pass size and padding shard_positions_ was built for
  bool shard_pad_ = false;
  Tensor table_;  // StepParams [table_entries_] on the device (stored as bytes)
  int64_t table_entries_ = 0;
  std::vector<StepParams> table_host_;
  // The caller-step window: table entries [0, kStepWindow) hold steps
  // window_first_.. under these counters; any other use of the table clears it.
  bool window_valid_ = false;
  int64_t window_first_ = 0, window_opt_steps_ = 0, window_fit_end_ = 0;
  std::vector<Program> programs_;  // most recently used last
  uint64_t rng_seed_ = 0, rng_counter_ = 0;  // rng_counter_: shuffles drawn
  int64_t steps_done_ = 0, epochs_done_ = 0;
  int64_t fit_end_ = 0;  // steps_done at the end of the running fit; 0 outside fit
};

}  // namespace kiln
