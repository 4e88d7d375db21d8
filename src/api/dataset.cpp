// C entry points for datasets: kiln_dataset_*.
#include <string>

#include "api/handles.hpp"
#include "train/dataset.hpp"

namespace {

using kiln::Dataset;
using kiln::Tensor;
using kiln::api::guard;
using kiln::api::query;
using kiln::api::make_handle;
using kiln::api::require;
using kiln::api::value;

// Two handles for one result, both or neither: if the second cannot be
// made, the first is released rather than leaked.
template <class H, class A, class B> void make_pair_of_handles(A &&a, B &&b, H **out_a, H **out_b) {
  H *first = make_handle<H>(std::forward<A>(a));
  try {
    *out_b = make_handle<H>(std::forward<B>(b));
  } catch (...) {
    kiln::api::release_handle(first);
    throw;
  }
  *out_a = first;
}

}  // namespace

extern "C" {

KILN_API kiln_status kiln_dataset_from_tensors(kiln_context *ctx, const kiln_tensor *x, const kiln_tensor *y,
                                               kiln_dataset **out) {
  return guard(
      [&] {
        auto c = value(ctx, "ctx");
        Tensor tx = value(x, "x"), ty = value(y, "y");
        require(out, "out");
        kiln::check(tx.context() == c && ty.context() == c, KILN_ERROR_INVALID_ARGUMENT,
                    "x and y must belong to the context the dataset is made in");
        *out = make_handle<kiln_dataset>(Dataset::from_tensors(tx, ty));
      },
      out);
}

KILN_API kiln_status kiln_dataset_load_idx(kiln_context *ctx, const char *images_path, const char *labels_path,
                                           kiln_dataset **out) {
  return guard(
      [&] {
        auto c = value(ctx, "ctx");
        require(images_path, "images_path");
        require(labels_path, "labels_path");
        require(out, "out");
        *out = make_handle<kiln_dataset>(Dataset::from_idx(c, images_path, labels_path));
      },
      out);
}

KILN_API kiln_status kiln_dataset_load_mnist(kiln_context *ctx, const char *dir, const char *split,
                                             kiln_dataset **out) {
  return guard(
      [&] {
        auto c = value(ctx, "ctx");
        require(dir, "dir");
        require(split, "split");
        require(out, "out");
        *out = make_handle<kiln_dataset>(Dataset::from_mnist_dir(c, dir, split));
      },
      out);
}

KILN_API void kiln_dataset_release(kiln_dataset *dataset) { kiln::api::release_handle(dataset); }

KILN_API kiln_status kiln_dataset_retain(kiln_dataset *dataset, kiln_dataset **out) {
  return kiln::api::retain_handle(dataset, "dataset", out);
}

KILN_API kiln_status kiln_dataset_size(const kiln_dataset *dataset, int64_t *out) {
  return query(dataset, "dataset", out, [](const auto &d) { return d->size(); });
}

KILN_API kiln_status kiln_dataset_num_features(const kiln_dataset *dataset, int64_t *out) {
  return query(dataset, "dataset", out, [](const auto &d) { return d->num_features(); });
}

KILN_API kiln_status kiln_dataset_num_classes(const kiln_dataset *dataset, int64_t *out) {
  return query(dataset, "dataset", out, [](const auto &d) { return d->num_classes(); });
}

KILN_API kiln_status kiln_dataset_set_normalization(kiln_dataset *dataset, double scale, double mean, double std) {
  return guard([&] { value(dataset, "dataset")->set_normalization(scale, mean, std); });
}

KILN_API kiln_status kiln_dataset_split(const kiln_dataset *dataset, double validation_fraction, uint64_t seed,
                                        kiln_dataset **train, kiln_dataset **validation) {
  return guard(
      [&] {
        auto d = value(dataset, "dataset");
        require(train, "train");
        require(validation, "validation");
        kiln::check(train != validation, KILN_ERROR_INVALID_ARGUMENT, "train and validation point to one variable");
        auto parts = d->split(validation_fraction, seed);
        make_pair_of_handles<kiln_dataset>(std::move(parts.first), std::move(parts.second), train, validation);
      },
      train, validation);
}

KILN_API kiln_status kiln_dataset_batch(const kiln_dataset *dataset, int64_t start, int64_t count,
                                        kiln_device device, kiln_tensor **x, kiln_tensor **y) {
  return guard(
      [&] {
        auto d = value(dataset, "dataset");
        require(x, "x");
        require(y, "y");
        kiln::check(static_cast<void *>(x) != static_cast<void *>(y), KILN_ERROR_INVALID_ARGUMENT,
                    "x and y point to one variable");
        Tensor bx, by;
        d->batch(start, count, kiln::api::device(device), &bx, &by);
        make_pair_of_handles<kiln_tensor>(std::move(bx), std::move(by), x, y);
      },
      x, y);
}

}  // extern "C"
