// C entry points for tensors: kiln_tensor_* and kiln_dtype_*.
#include <algorithm>
#include <cstring>
#include <string>

#include "api/handles.hpp"
#include "core/dlpack.hpp"
#include "core/ops.hpp"
#include "core/random.hpp"

namespace {

using kiln::Tensor;
using kiln::api::guard;
using kiln::api::query;
using kiln::api::make_handle;
using kiln::api::require;
using kiln::api::checked_enum;
using kiln::api::value;

kiln_tensor *wrap(Tensor t) { return make_handle<kiln_tensor>(std::move(t)); }

// The C ops, taken by reference: checked_enum reads their representation.
kiln::BinaryOp binary_op(const kiln_binary_op &op) {
  return kiln::BinaryOp(int(kiln::BinaryOp::Add) + int(checked_enum(op, KILN_ADD, KILN_POW, "binary op")));
}

kiln::BinaryOp compare_op(const kiln_compare_op &op) {
  return kiln::BinaryOp(int(kiln::BinaryOp::Eq) + int(checked_enum(op, KILN_EQ, KILN_GE, "compare op")));
}

kiln::UnaryOp unary_op(const kiln_unary_op &op) {
  return kiln::UnaryOp(int(kiln::UnaryOp::Neg) + int(checked_enum(op, KILN_NEG, KILN_LEAKY_RELU, "unary op")));
}

kiln::ReduceOp reduce_op(const kiln_reduce_op &op) {
  return kiln::ReduceOp(int(kiln::ReduceOp::Sum) + int(checked_enum(op, KILN_SUM, KILN_ARGMAX, "reduce op")));
}

// The C enums and the backend's share their order; these keep it so.
static_assert(int(kiln::BinaryOp::Pow) - int(kiln::BinaryOp::Add) == KILN_POW - KILN_ADD);
static_assert(int(kiln::BinaryOp::Ge) - int(kiln::BinaryOp::Eq) == KILN_GE - KILN_EQ);
static_assert(int(kiln::UnaryOp::LeakyRelu) - int(kiln::UnaryOp::Neg) == KILN_LEAKY_RELU - KILN_NEG);
static_assert(int(kiln::ReduceOp::Argmax) - int(kiln::ReduceOp::Sum) == KILN_ARGMAX - KILN_SUM);

// The common body of the shape-driven creators.
template <class Make>
kiln_status create(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype, kiln_device device,
                   kiln_tensor **out, Make make) {
  return guard(
      [&] {
        auto c = value(ctx, "ctx");
        require(out, "out");
        kiln::Shape s = kiln::Shape::from(shape, ndim);
        *out = wrap(make(c, s, kiln::api::dtype(dtype), kiln::api::device(device)));
      },
      out);
}

// The entry points with two tensors in and one out; make(a, b) runs inside
// the guard, so the C enum it converts is checked there too.
template <class Make>
kiln_status two_tensors(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor **out, Make make) noexcept {
  return guard(
      [&] {
        Tensor ta = value(a, "a"), tb = value(b, "b");
        require(out, "out");
        *out = wrap(make(ta, tb));
      },
      out);
}

}  // namespace

extern "C" {

KILN_API const char *kiln_dtype_name(kiln_dtype dtype) {
  int raw;
  std::memcpy(&raw, &dtype, sizeof raw);  // any int from C: see checked_enum
  return kiln::dtype_valid(raw) ? kiln::dtype_name(kiln::DType(raw)) : nullptr;
}

KILN_API int64_t kiln_dtype_size(kiln_dtype dtype) {
  int raw;
  std::memcpy(&raw, &dtype, sizeof raw);
  return kiln::dtype_valid(raw) ? kiln::dtype_size(kiln::DType(raw)) : 0;
}

KILN_API kiln_status kiln_tensor_empty(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                                       kiln_device device, kiln_tensor **out) {
  return create(ctx, shape, ndim, dtype, device, out,
                [](auto &c, auto &s, kiln::DType t, kiln::Device d) { return Tensor::empty(c, s, t, d); });
}

KILN_API kiln_status kiln_tensor_zeros(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                                       kiln_device device, kiln_tensor **out) {
  return create(ctx, shape, ndim, dtype, device, out,
                [](auto &c, auto &s, kiln::DType t, kiln::Device d) { return Tensor::full(c, s, t, d, 0.0); });
}

KILN_API kiln_status kiln_tensor_ones(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                                      kiln_device device, kiln_tensor **out) {
  return create(ctx, shape, ndim, dtype, device, out,
                [](auto &c, auto &s, kiln::DType t, kiln::Device d) { return Tensor::full(c, s, t, d, 1.0); });
}

KILN_API kiln_status kiln_tensor_full(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                                      kiln_device device, double fill, kiln_tensor **out) {
  return create(ctx, shape, ndim, dtype, device, out,
                [fill](auto &c, auto &s, kiln::DType t, kiln::Device d) { return Tensor::full(c, s, t, d, fill); });
}

KILN_API kiln_status kiln_tensor_rand(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                                      kiln_device device, kiln_tensor **out) {
  return create(ctx, shape, ndim, dtype, device, out,
                [](auto &c, auto &s, kiln::DType t, kiln::Device d) { return kiln::rand(c, s, t, d); });
}

KILN_API kiln_status kiln_tensor_randn(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                                       kiln_device device, kiln_tensor **out) {
  return create(ctx, shape, ndim, dtype, device, out,
                [](auto &c, auto &s, kiln::DType t, kiln::Device d) { return kiln::randn(c, s, t, d); });
}

KILN_API kiln_status kiln_tensor_arange(kiln_context *ctx, double start, double end, double step, kiln_dtype dtype,
                                        kiln_device device, kiln_tensor **out) {
  return query(ctx, "ctx", out, [&](const auto &c) {
    return wrap(Tensor::arange(c, start, end, step, kiln::api::dtype(dtype), kiln::api::device(device)));
  });
}

KILN_API kiln_status kiln_tensor_from_host(kiln_context *ctx, const void *data, int64_t nbytes, const int64_t *shape,
                                           int64_t ndim, kiln_dtype dtype, kiln_device device, kiln_tensor **out) {
  return guard(
      [&] {
        auto c = value(ctx, "ctx");
        require(out, "out");
        if (nbytes != 0) require(data, "data");
        kiln::Shape s = kiln::Shape::from(shape, ndim);
        *out = wrap(Tensor::from_host(c, data, nbytes, s, kiln::api::dtype(dtype), kiln::api::device(device)));
      },
      out);
}

KILN_API kiln_status kiln_tensor_empty_pinned(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                                              kiln_tensor **out) {
  return guard(
      [&] {
        auto c = value(ctx, "ctx");
        require(out, "out");
        kiln::Shape s = kiln::Shape::from(shape, ndim);
        *out = wrap(Tensor::empty_pinned(c, s, kiln::api::dtype(dtype)));
      },
      out);
}

KILN_API void kiln_tensor_release(kiln_tensor *tensor) { kiln::api::release_handle(tensor); }

KILN_API kiln_status kiln_tensor_retain(kiln_tensor *tensor, kiln_tensor **out) {
  return kiln::api::retain_handle(tensor, "tensor", out);
}

KILN_API kiln_status kiln_tensor_copy_to_host(const kiln_tensor *tensor, void *data, int64_t nbytes) {
  return guard([&] {
    Tensor t = value(tensor, "tensor");
    if (nbytes != 0) require(data, "data");
    t.copy_to_host(data, nbytes);
  });
}

KILN_API kiln_status kiln_tensor_copy_from_host(kiln_tensor *tensor, const void *data, int64_t nbytes) {
  return guard([&] {
    Tensor t = value(tensor, "tensor");
    if (nbytes != 0) require(data, "data");
    t.copy_from_host(data, nbytes);
  });
}

KILN_API kiln_status kiln_tensor_item(const kiln_tensor *tensor, double *out) {
  return query(tensor, "tensor", out, [](const auto &t) { return t.item(); });
}

KILN_API kiln_status kiln_tensor_to(const kiln_tensor *tensor, kiln_device device, kiln_tensor **out) {
  return query(tensor, "tensor", out, [&](const auto &t) { return wrap(t.to(kiln::api::device(device))); });
}

KILN_API kiln_status kiln_tensor_cast(const kiln_tensor *tensor, kiln_dtype dtype, kiln_tensor **out) {
  return query(tensor, "tensor", out, [&](const auto &t) { return wrap(kiln::cast(t, kiln::api::dtype(dtype))); });
}

KILN_API kiln_status kiln_tensor_clone(const kiln_tensor *tensor, kiln_tensor **out) {
  return query(tensor, "tensor", out, [&](const auto &t) { return wrap(t.clone()); });
}

KILN_API kiln_status kiln_tensor_ndim(const kiln_tensor *tensor, int64_t *out) {
  return query(tensor, "tensor", out, [](const auto &t) { return t.ndim(); });
}

KILN_API kiln_status kiln_tensor_dim(const kiln_tensor *tensor, int64_t dim, int64_t *out) {
  return guard(
      [&] {
        Tensor t = value(tensor, "tensor");
        require(out, "out");
        // Unlike the reductions, a 0-d tensor has no dimension to query.
        kiln::check(t.ndim() > 0, KILN_ERROR_INVALID_ARGUMENT,
                    "dim " + std::to_string(dim) + " of a 0-d tensor: it has no dimensions");
        *out = t.dim(kiln::normalize_dim(dim, t.ndim()));
      },
      out);
}

KILN_API kiln_status kiln_tensor_shape(const kiln_tensor *tensor, int64_t *shape, int64_t capacity) {
  const kiln_status status = guard([&] {
    Tensor t = value(tensor, "tensor");
    kiln::check(capacity >= t.ndim(), KILN_ERROR_INVALID_ARGUMENT,
                "capacity " + std::to_string(capacity) + " is smaller than the tensor's " + std::to_string(t.ndim()) +
                    " dimensions");
    if (t.ndim() > 0) require(shape, "shape");
    for (int i = 0; i < t.ndim(); ++i) shape[i] = t.dim(i);
  });
  // A failed call's out-parameter is zeroed, as far as the caller said it
  // goes (and no further than any shape could).
  if (status != KILN_OK && shape)
    for (int64_t i = 0; i < std::min<int64_t>(capacity, KILN_MAX_DIMS); ++i) shape[i] = 0;
  return status;
}

KILN_API kiln_status kiln_tensor_numel(const kiln_tensor *tensor, int64_t *out) {
  return query(tensor, "tensor", out, [](const auto &t) { return t.numel(); });
}

KILN_API kiln_status kiln_tensor_dtype(const kiln_tensor *tensor, kiln_dtype *out) {
  return query(tensor, "tensor", out, [](const auto &t) { return kiln_dtype(t.dtype()); });
}

KILN_API kiln_status kiln_tensor_device(const kiln_tensor *tensor, kiln_device *out) {
  return query(tensor, "tensor", out, [](const auto &t) { return t.device().to_c(); });
}

KILN_API kiln_status kiln_tensor_get_device(const kiln_tensor *tensor, int64_t *out) {
  return query(tensor, "tensor", out, [](const auto &t) { return t.device().index; });
}

KILN_API kiln_status kiln_tensor_is_pinned(const kiln_tensor *tensor, int *out) {
  return query(tensor, "tensor", out, [](const auto &t) { return t.pinned() ? 1 : 0; });
}

KILN_API kiln_status kiln_tensor_to_dlpack(const kiln_tensor *tensor, uint64_t flags,
                                           DLManagedTensorVersioned **out) {
  return guard([&] {
    kiln::Tensor t = value(tensor, "tensor");
    require(out, "out");
    *out = kiln::to_dlpack(t, flags);
  }, out);
}

KILN_API kiln_status kiln_tensor_from_dlpack(kiln_context *ctx, DLManagedTensorVersioned *managed,
                                             kiln_tensor **out) {
  return guard([&] {
    std::shared_ptr<kiln::Context> c = value(ctx, "ctx");
    require(managed, "managed");
    require(out, "out");
    kiln::from_dlpack(c, managed, [&](const kiln::Tensor &t) { *out = kiln::api::make_handle<kiln_tensor>(t); });
  }, out);
}

KILN_API kiln_status kiln_tensor_reshape(const kiln_tensor *tensor, const int64_t *shape, int64_t ndim,
                                         kiln_tensor **out) {
  return query(tensor, "tensor", out, [&](const auto &t) { return wrap(t.reshape(kiln::Shape::pattern(shape, ndim))); });
}

KILN_API kiln_status kiln_tensor_rows(const kiln_tensor *tensor, int64_t start, int64_t end, kiln_tensor **out) {
  return query(tensor, "tensor", out, [&](const auto &t) { return wrap(t.rows(start, end)); });
}

KILN_API kiln_status kiln_tensor_binary(kiln_binary_op op, const kiln_tensor *a, const kiln_tensor *b,
                                        kiln_tensor **out) {
  return two_tensors(a, b, out, [&](const Tensor &ta, const Tensor &tb) { return kiln::binary(binary_op(op), ta, tb); });
}

KILN_API kiln_status kiln_tensor_scalar(kiln_binary_op op, const kiln_tensor *a, double scalar, kiln_tensor **out) {
  return query(a, "a", out, [&](const auto &ta) { return wrap(kiln::scalar(binary_op(op), ta, scalar)); });
}

KILN_API kiln_status kiln_tensor_compare(kiln_compare_op op, const kiln_tensor *a, const kiln_tensor *b,
                                         kiln_tensor **out) {
  return two_tensors(a, b, out,
                     [&](const Tensor &ta, const Tensor &tb) { return kiln::binary(compare_op(op), ta, tb); });
}

KILN_API kiln_status kiln_tensor_unary(kiln_unary_op op, const kiln_tensor *a, double alpha, kiln_tensor **out) {
  return query(a, "a", out, [&](const auto &ta) { return wrap(kiln::unary(unary_op(op), ta, alpha)); });
}

KILN_API kiln_status kiln_tensor_softmax(const kiln_tensor *a, int64_t dim, kiln_tensor **out) {
  return query(a, "a", out, [&](const auto &ta) { return wrap(kiln::softmax(ta, dim, false)); });
}

KILN_API kiln_status kiln_tensor_log_softmax(const kiln_tensor *a, int64_t dim, kiln_tensor **out) {
  return query(a, "a", out, [&](const auto &ta) { return wrap(kiln::softmax(ta, dim, true)); });
}

KILN_API kiln_status kiln_tensor_reduce(kiln_reduce_op op, const kiln_tensor *a, int64_t dim, int keepdim,
                                        kiln_tensor **out) {
  return query(a, "a", out, [&](const auto &ta) { return wrap(kiln::reduce(reduce_op(op), ta, dim, keepdim != 0)); });
}

KILN_API kiln_status kiln_tensor_matmul(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor **out) {
  return two_tensors(a, b, out, [&](const Tensor &ta, const Tensor &tb) { return kiln::matmul(ta, tb); });
}

}  // extern "C"
