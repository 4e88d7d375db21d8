// Trainer: runs optimisation steps, epochs and fits of one model on the
// device the model had when the trainer was created.
//
// A step is: forward over the workspace (nn/model.hpp), the loss kernel
// (which writes the gradient of the mean loss w.r.t. the logits in the same
// pass), backward into one flat gradient buffer, optional global-norm
// clipping, one optimizer kernel. Every buffer (workspace, batch, labels,
// gradients, optimizer state, permutation, statistics) is allocated once per
// batch size or dataset size and reused, so steps allocate nothing, and
// nothing is read back from the device except where a caller asks for it
// (a step's loss, progress reports, an epoch's end).
//
// Determinism: the shuffle permutation is a host Fisher-Yates driven by the
// trainer's own counter-based generator (seed from the options, else derived
// from the context), and dropout masks are keyed on (that seed, step), so a
// seed and a device give the same run every time, and a checkpoint (which
// stores the generator's position and the counters) resumes it exactly.
//
// Used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/model.hpp"
#include "nn/optimizer.hpp"
#include "nn/schedule.hpp"
#include "train/dataset.hpp"
#include "train/history.hpp"

namespace kiln {

struct TrainerOptions {
  kiln_loss_kind loss = KILN_LOSS_CROSS_ENTROPY;
  double lr = 0.01;
  OptimizerConfig optimizer;
  bool weight_decay_set = false;  // unset: 0, or AdamW's default 0.01
  int64_t batch_size = 64;
  double grad_clip = 0;  // max global norm; 0 = off
  ScheduleConfig schedule;
  bool shuffle_seed_set = false;
  uint64_t shuffle_seed = 0;
  int64_t progress_interval = 0;  // batches; 0 = end of epoch only

  // The optimizer settings with the defaults that depend on the kind filled in.
  OptimizerConfig resolved_optimizer() const;
};

class Trainer {
 public:
  // Validates options (INVALID_ARGUMENT naming the value).
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

  int64_t epochs_done() const { return epochs_done_; }
  int64_t steps_done() const { return steps_done_; }
  double current_lr() const;

  // train/checkpoint.cpp.
  void save_checkpoint(const std::string &path) const;
  void load_checkpoint(const std::string &path);

 private:
  // Throws INVALID_ARGUMENT when the model left the trainer's device.
  void check_model_device() const;
  // Checks the dataset against the model and the loss.
  void check_dataset(const Dataset &dataset, const char *what) const;
  // (Re)allocates the workspace and batch buffers for batches of up to rows.
  void ensure_capacity(int64_t rows);
  // Grows the permutation buffers to hold n indices.
  void ensure_order(int64_t n);
  // The device copy of src (x or y) in buf's dtype: src itself when it
  // already is, else converted / copied into buf's first rows.
  const void *stage(const Tensor &src, const Tensor &buf, int64_t rows);
  // Forward, loss into stats and, when update, backward and optimizer step.
  void run_batch(const void *x, const void *y, int64_t rows, bool training, double *stats, bool update);
  // One pass; epoch_index (1-based) and epochs only label progress reports.
  kiln_epoch_stats run_epoch(const Dataset &dataset, int64_t epoch_index, int64_t epochs, kiln_progress_fn callback,
                             void *user);
  // Reads the three pass statistics (loss sum, correct, bad labels) at offset.
  void read_stats(int64_t offset, double out[3]) const;
  // The next uniform integer in [0, n) from the trainer's generator.
  uint64_t next_below(uint64_t n);

  std::shared_ptr<Model> model_;
  TrainerOptions options_;
  Device device_;
  Optimizer optimizer_;
  Tensor grads_;  // flat, the model's layout; gaps stay zero
  Tensor stats_;  // F64 device accumulators (see kStats* in trainer.cpp)
  Workspace ws_;
  Tensor batch_x_, batch_y_;  // [capacity, in] model dtype; labels i64 [capacity] or targets [capacity, K]
  int64_t capacity_ = 0;
  std::vector<int64_t> order_;  // host sample order of the current pass
  Tensor order_device_;         // I64, as long as order_
  uint64_t rng_seed_ = 0, rng_counter_ = 0;
  int64_t steps_done_ = 0, epochs_done_ = 0;
  int64_t fit_end_ = 0;  // steps_done at the end of the running fit; 0 outside fit
};

}  // namespace kiln
