// The step builder: a trainer's model, settings and buffers -> the step
// program of one batch shape (core/program.hpp): gather the batch, (cast the
// weights for mixed precision), the model's forward ops, the loss (which
// writes the gradient of the mean loss w.r.t. the logits in the same pass),
// the backward ops into one flat gradient buffer with their casts and
// allreduces (train/gradient_reduce.hpp), optional clipping, one optimizer
// update. A pure function of its arguments: it allocates, launches and
// reads nothing, so tests call it directly (tests/program_test.cpp), and the
// program cache (train/program_cache.hpp) keys a compiled program on
// step_key(build), everything a program depends on that can change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/collective.hpp"
#include "core/program.hpp"
#include "nn/model.hpp"
#include "nn/optimizer.hpp"

namespace kiln {

// What a loss kernel adds into (LossArgs::stats): its three doubles.
struct PassStats {
  double loss_sum = 0, correct = 0, bad_labels = 0;
};

// The trainer's block of F64 device statistics, which programs add into and
// the trainer reads back. On the device as doubles; stats_field gives a
// member's address from the block's.
struct StepStats {
  PassStats pass;           // the running epoch or evaluation
  PassStats step;           // one kiln_trainer_step
  double clip_scratch = 0;  // ClipOp's
};
static_assert(sizeof(StepStats) % sizeof(double) == 0, "StepStats is a whole number of doubles");
inline double *stats_field(void *block, size_t offset) {
  return reinterpret_cast<double *>(static_cast<char *>(block) + offset);
}

// A data source as a step program reads it (Dataset::GatherSource), by value.
struct SourceView {
  uint64_t data = 0;  // the dataset's data identity (Dataset::data_id): never reused, 0 for none
  const void *x = nullptr, *y = nullptr;
  DType x_type = DType::F32, y_type = DType::I64;
  double scale = 1, shift = 0;
  int64_t cols = 0, y_cols = 0;
};

// What a trainer fixes for its life: the settings a program follows.
struct StepConfig {
  kiln_loss_kind loss = KILN_LOSS_CROSS_ENTROPY;
  double label_smoothing = 0;
  double grad_clip = 0;
  int64_t bucket_bytes = 0;
  uint32_t fast_path = kFastAll;
  DType work = DType::F32;  // activations and products: the model's dtype, or BF16 (mixed precision)
  MathMode math = MathMode::Exact;
  std::string precision;  // for the program's label
};

// The trainer's buffers a program reads and writes. `generation` names their
// allocation: the trainer counts it up whenever it allocates any of them
// anew (a larger batch, a larger dataset).
struct StepBuffers {
  uint64_t generation = 0;
  const Workspace *ws = nullptr;  // per stage: outputs, gradients, pre-activations, masks
  void *batch_x = nullptr;        // [capacity, in] of config.work
  void *batch_y = nullptr;        // labels I64 [capacity] or targets [capacity, out]
  DType batch_y_type = DType::I64;
  void *logits32 = nullptr, *dlogits32 = nullptr;  // [capacity, out] f32 (mixed precision only)
  void *grads = nullptr;                           // flat, the model's layout and dtype
  void *lp_params = nullptr, *lp_grads = nullptr;  // their bf16 twins (mixed precision only)
  void *stats = nullptr;                           // a StepStats block
  const StepParams *table = nullptr;               // the step table
  int64_t table_size = 0;
  const int64_t *rows = nullptr;  // the pass's data rows, which a gather reads
};

struct StepBuild {
  const Model *model = nullptr;
  const Optimizer *optimizer = nullptr;
  const StepConfig *config = nullptr;
  const StepBuffers *buffers = nullptr;
  // Data parallel: the gradients' allreduce (none for a communicator of one
  // rank); null for one process.
  Collective *comm = nullptr;
  bool trains = false;    // backward and update, or the loss only (evaluation)
  bool training = false;  // the model's training mode (Dropout)
  int64_t rows = 0;
  const SourceView *source = nullptr;  // a dataset's batch gathered by the program; null: staged in batch_x
};

StepProgram build_step_program(const StepBuild &b);

// Everything a program built from b depends on that can change during a
// trainer's life (its model, optimizer and config cannot): two builds with
// equal keys give the same program.
struct StepKey {
  bool trains = false, training = false;
  int64_t rows = 0;
  bool has_source = false;
  SourceView source;
  uint64_t buffers = 0;          // StepBuffers::generation
  const void *params = nullptr;  // the model's flat buffer (it moves with the model)
  const Collective *comm = nullptr;
  bool operator==(const StepKey &other) const;
};
StepKey step_key(const StepBuild &b);

}  // namespace kiln
