// Dataset: N samples of features x and targets y, for the trainer and
// kiln_dataset_*. Held by shared_ptr.
//
//  - x is [N, ...] of a float dtype or u8, viewed as [N, num_features()];
//    u8 stays u8 in memory (4x smaller on the device) and is converted per
//    batch by the backend's gather, which also applies normalisation
//    (x * scale - mean) / std folded into one multiply-add.
//  - y is [N] integer class labels (u8, i32, i64; all >= 0) or [N, k] float
//    targets.
//  - The data is copied to a device once, on the first gather there, and
//    kept resident for every later batch (the fast path).
//  - split() makes datasets that share the data (and its resident copies)
//    and select rows through an index map.
//
// Threads: every const member may be called from several threads at once.
// set_normalization may run concurrently too (batches see the old or the new
// setting, never a mix).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"

namespace kiln {

class Dataset {
 public:
  // x and y are referenced, not copied. Throws SHAPE_MISMATCH when their
  // first dimensions differ or y has another shape than [N] / [N, k],
  // DTYPE_MISMATCH for an unsupported dtype, INVALID_ARGUMENT for an empty
  // dataset, tensors of two contexts, or a negative label. x and y may be on
  // different devices.
  static std::shared_ptr<Dataset> from_tensors(const Tensor &x, const Tensor &y);
  // An IDX image file and an IDX label file (raw or gzip), as MNIST ships
  // them: IO / FORMAT from io::read_idx, FORMAT when the files disagree on
  // the sample count, the labels are not 1-D non-negative integers or the
  // images are integers other than u8.
  static std::shared_ptr<Dataset> from_idx(const std::shared_ptr<Context> &ctx, const std::string &images_path,
                                           const std::string &labels_path);
  // split "train" or "test" (INVALID_ARGUMENT otherwise) of an MNIST-layout
  // directory: {train,t10k}-{images-idx3,labels-idx1}-ubyte, each raw or with
  // ".gz" (the raw file wins when both exist). IO naming the directory and
  // the names looked for when a file is missing.
  static std::shared_ptr<Dataset> from_mnist_dir(const std::shared_ptr<Context> &ctx, const std::string &dir,
                                                 const std::string &split);

  const std::shared_ptr<Context> &context() const;
  int64_t size() const { return size_; }
  int64_t num_features() const;
  // True for integer class labels, false for float targets.
  bool has_class_labels() const;
  // 1 + the largest label of the whole underlying data (a split keeps its
  // source's count) for class labels; the target width k otherwise.
  int64_t num_classes() const;
  // k for float targets; 0 for class labels.
  int64_t target_width() const;

  // Batched features become (x * scale - mean) / std. Defaults: scale 1/255
  // for u8 features, 1 for floats; mean 0; std 1. INVALID_ARGUMENT unless all
  // three are finite and std > 0.
  void set_normalization(double scale, double mean, double std);

  // A seeded random split: validation gets round(size * fraction) samples,
  // train the rest; both must be non-empty (INVALID_ARGUMENT), and 0 <
  // fraction < 1. The permutation is a Fisher-Yates shuffle driven by
  // core/rng.hpp, so a seed splits the same way on every platform. Each part
  // lists its rows in ascending order and inherits the normalisation.
  // Returns {train, validation}.
  std::pair<std::shared_ptr<Dataset>, std::shared_ptr<Dataset>> split(double fraction, uint64_t seed) const;

  // What batch assembly (Backend::gather, a step program's GatherOp) reads
  // on device d: the resident data (copied there and waited for once, on
  // first use; OOM if it does not fit), the normalisation folded into
  // x * scale + shift, and for a split its index map (sample -> row of x;
  // undefined for a whole dataset). The tensors stay valid while the dataset
  // lives; later calls neither wait nor allocate.
  struct GatherSource {
    // The identity of the samples: shared by a dataset's splits (which read
    // the same data), never given to other data in the process's life, so
    // a program built for one dataset is never taken for another that
    // reuses its memory (train/program_cache.hpp).
    uint64_t data = 0;
    Tensor x, y, map;
    double scale = 1, shift = 0;
    int64_t cols = 0;    // features per sample
    int64_t y_cols = 0;  // 0 for class labels, else the target width

    // Queues rows[i] = map[samples[i]] for i < count (rows = samples when
    // there is no map), on x's device; returns rows.
    const int64_t *rows_of(const int64_t *samples, int64_t count, int64_t *rows) const;
    // The gather of rows [0, count) of out_x / out_y from data rows
    // order[offset + r], with out_y of out_y_type.
    GatherArgs args(const int64_t *order, int64_t count, DType out_x_type, void *out_x, DType out_y_type,
                    void *out_y) const;
  };
  GatherSource gather_source(Device d) const;

  // Samples [start, start + count) as new tensors on device: *x f32 [count,
  // features] normalised, *y i64 [count] labels or f32 [count, k] targets.
  // INVALID_ARGUMENT unless 0 <= start, 0 < count, start + count <= size().
  void batch(int64_t start, int64_t count, Device device, Tensor *x, Tensor *y) const;

 private:
  struct Data;  // the samples and their resident copies, shared with splits
  struct Normalization {
    double scale = 1.0, shift = 0.0;  // x * scale + shift, folded from (x * s - mean) / std
  };

  Dataset(std::shared_ptr<Data> data, std::vector<int64_t> rows, Normalization norm);
  // from_tensors' work; a negative label throws bad_label naming `source`
  // (INVALID_ARGUMENT for caller tensors, FORMAT for files).
  static std::shared_ptr<Dataset> create(const Tensor &x, const Tensor &y, kiln_status bad_label,
                                         const std::string &source);
  Normalization normalization() const;
  // A split's index map on device d (I64 [size_]: row of Data for each
  // sample), copied there on first use.
  const Tensor &device_map(Device d) const;

  std::shared_ptr<Data> data_;
  int64_t size_ = 0;
  std::vector<int64_t> rows_;  // empty: sample i is row i of data_; else rows_[i]
  mutable std::mutex mutex_;   // guards norm_ and index_
  Normalization norm_;
  mutable std::map<std::pair<int, int64_t>, Tensor> index_;
};

}  // namespace kiln
