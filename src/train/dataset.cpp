// Datasets: validation at construction, device-resident copies, seeded
// splits through index maps, and batch assembly with the backend's gather
// kernels. See dataset.hpp.
#include "train/dataset.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/context.hpp"
#include "core/number_text.hpp"
#include "core/rng.hpp"
#include "io/idx.hpp"

namespace kiln {

namespace {

using DeviceKey = std::pair<int, int64_t>;
DeviceKey key_of(Device d) { return {int(d.kind), d.index}; }

bool is_label_dtype(DType t) { return t == DType::U8 || t == DType::I32 || t == DType::I64; }

// The largest of n integer labels of dtype t on the host, after checking
// that none is negative.
template <class T> int64_t max_label(const void *data, int64_t n, kiln_status bad_label, const std::string &source) {
  const T *p = static_cast<const T *>(data);
  int64_t largest = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = int64_t(p[i]);
    if (v < 0)
      fail(bad_label, source + " has a negative label " + std::to_string(v) + " at sample " + std::to_string(i));
    largest = std::max(largest, v);
  }
  return largest;
}

bool is_regular_file(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

// The samples, shared by a dataset and all splits made from it.
struct Dataset::Data {
  // Numbered from 1 in creation order: 2^64 datasets outlast any process.
  static uint64_t next_id() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }

  const uint64_t id = next_id();
  std::shared_ptr<Context> ctx;
  Tensor x;                 // [N, features], float or U8
  Tensor y;                 // [N] labels or [N, k] float targets
  bool labels = true;
  int64_t num_classes = 0;  // 1 + max label, or k

  struct Resident {
    Tensor x, y;
  };
  std::mutex mutex;  // guards resident
  std::map<DeviceKey, Resident> resident;

  // x and y on device d, copied there on first use. The copy is waited for
  // once, so kernels of any stream (another context's) may read it.
  Resident on(Device d) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = resident.find(key_of(d));
    if (it != resident.end()) return it->second;
    Resident r{x.to(d), y.to(d)};
    ctx->backend(d).synchronize(d.index);
    resident.emplace(key_of(d), r);
    return r;
  }
};

Dataset::Dataset(std::shared_ptr<Data> data, std::vector<int64_t> rows, Normalization norm)
    : data_(std::move(data)), rows_(std::move(rows)), norm_(norm) {
  size_ = rows_.empty() ? data_->x.dim(0) : int64_t(rows_.size());
}

std::shared_ptr<Dataset> Dataset::create(const Tensor &x, const Tensor &y, kiln_status bad_label,
                                         const std::string &source) {
  check(x.defined() && y.defined(), KILN_ERROR_INVALID_ARGUMENT, "dataset tensors must be defined");
  check(x.context() == y.context(), KILN_ERROR_INVALID_ARGUMENT, "x and y belong to different contexts");
  check(dtype_is_float(x.dtype()) || x.dtype() == DType::U8, KILN_ERROR_DTYPE_MISMATCH,
        std::string("dataset features must be a float dtype or u8, not ") + dtype_name(x.dtype()));
  check(x.ndim() >= 1, KILN_ERROR_SHAPE_MISMATCH, "dataset features must be [N, ...], not a scalar");
  const int64_t n = x.dim(0);
  check(n > 0, KILN_ERROR_INVALID_ARGUMENT, "a dataset needs at least one sample, x has shape " + x.shape().str());
  const int64_t features = x.numel() / n;
  check(features > 0, KILN_ERROR_INVALID_ARGUMENT, "dataset samples have no features: x has shape " + x.shape().str());

  auto data = std::make_shared<Data>();
  data->ctx = x.context();
  data->x = x.reshape(Shape{n, features});
  data->y = y;
  if (is_label_dtype(y.dtype())) {
    check(y.ndim() == 1, KILN_ERROR_SHAPE_MISMATCH,
          "class labels must be [N], not " + y.shape().str() + " (float targets are [N, k])");
    data->labels = true;
  } else {
    check(dtype_is_float(y.dtype()), KILN_ERROR_DTYPE_MISMATCH,
          std::string("dataset targets must be integer labels or float, not ") + dtype_name(y.dtype()));
    check(y.ndim() == 2, KILN_ERROR_SHAPE_MISMATCH,
          "float targets must be [N, k], not " + y.shape().str() + " (reshape [N] targets to [N, 1])");
    data->labels = false;
  }
  check(y.dim(0) == n, KILN_ERROR_SHAPE_MISMATCH,
        "x has " + std::to_string(n) + " samples (shape " + x.shape().str() + ") but y has " +
            std::to_string(y.dim(0)) + " (shape " + y.shape().str() + ")");

  if (data->labels) {
    // One pass on the host, now, so num_classes never waits for a device.
    Tensor host = y.to(Device::cpu());
    std::vector<unsigned char> bytes(size_t(host.nbytes()));
    host.copy_to_host(bytes.data(), host.nbytes());
    int64_t largest = 0;
    switch (y.dtype()) {
      case DType::U8: largest = max_label<uint8_t>(bytes.data(), n, bad_label, source); break;
      case DType::I32: largest = max_label<int32_t>(bytes.data(), n, bad_label, source); break;
      default: largest = max_label<int64_t>(bytes.data(), n, bad_label, source); break;
    }
    check(largest < INT64_MAX, bad_label, source + " has a label too large to count classes");
    data->num_classes = largest + 1;
  } else {
    data->num_classes = y.dim(1);
  }

  Normalization norm;
  if (x.dtype() == DType::U8) norm.scale = 1.0 / 255.0;
  return std::shared_ptr<Dataset>(new Dataset(std::move(data), {}, norm));
}

std::shared_ptr<Dataset> Dataset::from_tensors(const Tensor &x, const Tensor &y) {
  return create(x, y, KILN_ERROR_INVALID_ARGUMENT, "y");
}

std::shared_ptr<Dataset> Dataset::from_idx(const std::shared_ptr<Context> &ctx, const std::string &images_path,
                                           const std::string &labels_path) {
  Tensor images = io::read_idx(images_path, ctx);
  Tensor labels = io::read_idx(labels_path, ctx);
  check(images.dtype() != DType::I32, KILN_ERROR_FORMAT,
        "IDX image file '" + images_path + "' holds signed integers (i8, i16 or i32); kiln reads u8 or float images");
  check(labels.ndim() == 1 && is_label_dtype(labels.dtype()), KILN_ERROR_FORMAT,
        "IDX label file '" + labels_path + "' must hold one integer label per sample, but holds " +
            dtype_name(labels.dtype()) + " " + labels.shape().str());
  check(images.dim(0) == labels.dim(0), KILN_ERROR_FORMAT,
        "IDX files disagree on the number of samples: '" + images_path + "' has " + std::to_string(images.dim(0)) +
            ", '" + labels_path + "' has " + std::to_string(labels.dim(0)));
  check(images.dim(0) > 0, KILN_ERROR_FORMAT, "IDX files '" + images_path + "' and '" + labels_path + "' hold no samples");
  check(images.numel() > 0, KILN_ERROR_FORMAT,
        "IDX image file '" + images_path + "' holds samples of no features: shape " + images.shape().str());
  return create(images, labels, KILN_ERROR_FORMAT, "IDX label file '" + labels_path + "'");
}

std::shared_ptr<Dataset> Dataset::from_mnist_dir(const std::shared_ptr<Context> &ctx, const std::string &dir,
                                                 const std::string &split) {
  check(split == "train" || split == "test", KILN_ERROR_INVALID_ARGUMENT,
        "MNIST split must be \"train\" or \"test\", not \"" + split + "\"");
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) fail(KILN_ERROR_IO, "MNIST directory '" + dir + "': " + std::strerror(errno));
  check(S_ISDIR(st.st_mode), KILN_ERROR_IO, "MNIST directory '" + dir + "' is not a directory");
  const std::string prefix = dir + "/" + (split == "train" ? "train" : "t10k");
  auto find = [&](const std::string &stem) {
    const std::string raw = prefix + stem;
    if (is_regular_file(raw)) return raw;
    if (is_regular_file(raw + ".gz")) return raw + ".gz";
    fail(KILN_ERROR_IO, "MNIST directory '" + dir + "' has neither " + raw + " nor " + raw + ".gz");
  };
  const std::string images = find("-images-idx3-ubyte"), labels = find("-labels-idx1-ubyte");
  return from_idx(ctx, images, labels);
}

const std::shared_ptr<Context> &Dataset::context() const { return data_->ctx; }
int64_t Dataset::num_features() const { return data_->x.dim(1); }
bool Dataset::has_class_labels() const { return data_->labels; }
int64_t Dataset::num_classes() const { return data_->num_classes; }
int64_t Dataset::target_width() const { return data_->labels ? 0 : data_->y.dim(1); }

void Dataset::set_normalization(double scale, double mean, double std) {
  check(std::isfinite(scale) && std::isfinite(mean) && std::isfinite(std), KILN_ERROR_INVALID_ARGUMENT,
        "normalisation values must be finite (scale " + number_text(scale) + ", mean " + number_text(mean) + ", std " +
            number_text(std) + ")");
  check(std > 0, KILN_ERROR_INVALID_ARGUMENT, "normalisation std must be > 0, got " + number_text(std));
  // (x * scale - mean) / std == x * (scale / std) + (-mean / std)
  Normalization norm{scale / std, -mean / std};
  check(std::isfinite(norm.scale) && std::isfinite(norm.shift), KILN_ERROR_INVALID_ARGUMENT,
        "normalisation overflows: std " + number_text(std) + " is too small for scale " + number_text(scale) +
            " and mean " + number_text(mean));
  std::lock_guard<std::mutex> lock(mutex_);
  norm_ = norm;
}

Dataset::Normalization Dataset::normalization() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return norm_;
}

std::pair<std::shared_ptr<Dataset>, std::shared_ptr<Dataset>> Dataset::split(double fraction, uint64_t seed) const {
  check(fraction > 0 && fraction < 1, KILN_ERROR_INVALID_ARGUMENT,
        "validation fraction must be in (0, 1), got " + number_text(fraction));
  const int64_t n = size_;
  const int64_t n_val = std::llround(double(n) * fraction);
  check(n_val > 0 && n_val < n, KILN_ERROR_INVALID_ARGUMENT,
        "splitting " + std::to_string(n) + " samples with fraction " + number_text(fraction) + " leaves " +
            std::to_string(n_val) + " for validation and " + std::to_string(n - n_val) +
            " for training; both need at least one");

  // Fisher-Yates over sample positions; draw i is rng_bits(seed, i), mapped
  // to [0, i] by a 128-bit multiply (no modulo bias), so the permutation is
  // a pure function of (seed, n).
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[size_t(i)] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    unsigned __int128 wide = (unsigned __int128)rng_bits(seed, uint64_t(i)) * uint64_t(i + 1);
    std::swap(perm[size_t(i)], perm[size_t(uint64_t(wide >> 64))]);
  }
  // Each part in ascending order (locality for gathers, data order for
  // evaluation), then mapped through this dataset's own rows.
  std::vector<int64_t> val(perm.begin(), perm.begin() + n_val), train(perm.begin() + n_val, perm.end());
  std::sort(val.begin(), val.end());
  std::sort(train.begin(), train.end());
  if (!rows_.empty()) {
    for (int64_t &r : val) r = rows_[size_t(r)];
    for (int64_t &r : train) r = rows_[size_t(r)];
  }
  const Normalization norm = normalization();
  return {std::shared_ptr<Dataset>(new Dataset(data_, std::move(train), norm)),
          std::shared_ptr<Dataset>(new Dataset(data_, std::move(val), norm))};
}

const Tensor &Dataset::device_map(Device d) const {
  std::lock_guard<std::mutex> lock(mutex_);
  Tensor &map = index_[key_of(d)];
  if (!map.defined()) {
    map = Tensor::from_host(data_->ctx, rows_.data(), size_ * int64_t(sizeof(int64_t)), Shape{size_}, DType::I64, d);
    data_->ctx->backend(d).synchronize(d.index);
  }
  return map;
}

Dataset::GatherSource Dataset::gather_source(Device d) const {
  const Data::Resident r = data_->on(d);
  const Normalization norm = normalization();
  GatherSource s;
  s.data = data_->id;
  s.x = r.x, s.y = r.y;
  if (!rows_.empty()) s.map = device_map(d);
  s.scale = norm.scale, s.shift = norm.shift;
  s.cols = num_features();
  s.y_cols = data_->labels ? 0 : target_width();
  return s;
}

const int64_t *Dataset::GatherSource::rows_of(const int64_t *samples, int64_t count, int64_t *rows) const {
  Backend &b = x.backend();
  if (!map.defined()) {
    b.copy_on_device(x.device().index, rows, samples, count * int64_t(sizeof(int64_t)));
    return rows;
  }
  GatherArgs compose;  // the labels half of a gather: an I64 take from the map
  compose.order = samples;
  compose.count = count;
  compose.y_type = DType::I64, compose.y = map.data(), compose.out_y = rows;
  b.gather(x.device().index, compose, nullptr);
  return rows;
}

GatherArgs Dataset::GatherSource::args(const int64_t *order, int64_t count, DType out_x_type, void *out_x,
                                       DType out_y_type, void *out_y) const {
  GatherArgs g;
  g.order = order;
  g.count = count;
  g.x_type = x.dtype(), g.x = x.data(), g.cols = cols;
  g.scale = scale, g.shift = shift;
  g.out_x_type = out_x_type, g.out_x = out_x;
  g.y_type = y.dtype(), g.y = y.data(), g.y_cols = y_cols;
  g.out_y_type = out_y_type, g.out_y = out_y;
  return g;
}

void Dataset::batch(int64_t start, int64_t count, Device device, Tensor *x, Tensor *y) const {
  check(start >= 0 && count > 0 && start <= size_ && count <= size_ - start, KILN_ERROR_INVALID_ARGUMENT,
        "batch [" + std::to_string(start) + ", " + std::to_string(start) + " + " + std::to_string(count) +
            ") is not a non-empty range of the dataset's " + std::to_string(size_) + " samples");
  const std::shared_ptr<Context> &ctx = data_->ctx;
  const GatherSource src = gather_source(device);
  Tensor samples = Tensor::arange(ctx, double(start), double(start + count), 1.0, DType::I64, device);
  Tensor rows = Tensor::empty(ctx, Shape{count}, DType::I64, device);
  Tensor bx = Tensor::empty(ctx, Shape{count, num_features()}, DType::F32, device);
  Tensor by = data_->labels ? Tensor::empty(ctx, Shape{count}, DType::I64, device)
                            : Tensor::empty(ctx, Shape{count, target_width()}, DType::F32, device);
  const int64_t *order = src.rows_of(samples.data_as<int64_t>(), count, rows.data_as<int64_t>());
  src.x.backend().gather(device.index, src.args(order, count, DType::F32, bx.data(), by.dtype(), by.data()), nullptr);
  *x = std::move(bx);
  *y = std::move(by);
}

}  // namespace kiln
