// Validation, result allocation and backend dispatch for the tensor math.
#include "core/ops.hpp"

#include <limits>
#include <string>

namespace kiln {

namespace {

bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

const char *binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Maximum: return "maximum";
    case BinaryOp::Minimum: return "minimum";
    case BinaryOp::Pow: return "pow";
    case BinaryOp::Eq: return "eq";
    case BinaryOp::Ne: return "ne";
    case BinaryOp::Lt: return "lt";
    case BinaryOp::Le: return "le";
    case BinaryOp::Gt: return "gt";
    case BinaryOp::Ge: return "ge";
  }
  return "?";
}

const char *unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::LeakyRelu: return "leaky_relu";
    case UnaryOp::Identity: return "identity";
    case UnaryOp::Elu: return "elu";
    case UnaryOp::Selu: return "selu";
    case UnaryOp::Softplus: return "softplus";
  }
  return "?";
}

const char *reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Argmax: return "argmax";
  }
  return "?";
}

void check_same_dtype(const Tensor &a, const Tensor &b, const char *op) {
  check(a.dtype() == b.dtype(), KILN_ERROR_DTYPE_MISMATCH,
        std::string(op) + " needs one dtype, got " + dtype_name(a.dtype()) + " and " + dtype_name(b.dtype()) +
            " (cast one first)");
}

// The CPU kernels read pinned inputs directly: copies from a GPU into them
// that are still running end first.
void wait_host_inputs(const Tensor &a, const Tensor &b) {
  a.wait_host_access();
  b.wait_host_access();
}

int64_t product(const Shape &s, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; ++i) n *= s[i];
  return n;
}

}  // namespace

void check_same_device(const Tensor &a, const Tensor &b) {
  check(a.device() == b.device(), KILN_ERROR_INVALID_ARGUMENT,
        "tensors are on different devices (" + a.device().str() + " and " + b.device().str() + ")");
}

void check_float(DType dtype, const char *op) {
  check(dtype_is_float(dtype), KILN_ERROR_DTYPE_MISMATCH,
        std::string(op) + " needs a float dtype (f32, f64, f16, bf16), got " + dtype_name(dtype));
}

int normalize_dim(int64_t dim, int ndim) {
  const int64_t n = ndim > 0 ? ndim : 1;
  check(dim >= -n && dim < n, KILN_ERROR_INVALID_ARGUMENT,
        "dim " + std::to_string(dim) + " is out of range for a tensor with " + std::to_string(ndim) +
            " dimensions (need " + std::to_string(-n) + " <= dim < " + std::to_string(n) + ")");
  return int(dim < 0 ? dim + n : dim);
}

Broadcast broadcast(const Shape &a, const Shape &b, Shape *out) {
  Shape shape;
  shape.ndim = a.ndim > b.ndim ? a.ndim : b.ndim;
  // Element strides of each input aligned to the result's dimensions, 0
  // where the input is broadcast.
  int64_t sa[kMaxDims], sb[kMaxDims];
  int64_t stride_a = 1, stride_b = 1;
  for (int i = shape.ndim - 1; i >= 0; --i) {
    const int ia = i - (shape.ndim - a.ndim), ib = i - (shape.ndim - b.ndim);
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    check(da == db || da == 1 || db == 1, KILN_ERROR_SHAPE_MISMATCH,
          "shape " + a.str() + " cannot broadcast with " + b.str());
    shape[i] = da == 1 ? db : da;
    sa[i] = da == 1 ? 0 : stride_a;
    sb[i] = db == 1 ? 0 : stride_b;
    stride_a *= da;
    stride_b *= db;
  }
  *out = shape;

  // The merging below multiplies sizes: legal shapes whose product does not
  // fit (or that hold no element, where any size is legal) stop here.
  int64_t numel = 1;
  bool too_large = false, empty = false;
  for (int i = 0; i < shape.ndim; ++i) {
    empty |= shape[i] == 0;
    too_large |= __builtin_mul_overflow(numel, shape[i], &numel);
  }
  Broadcast bc;
  if (empty) {
    bc.ndim = 1;  // nothing to compute
    return bc;
  }
  check(!too_large, KILN_ERROR_OUT_OF_MEMORY,
        "broadcasting " + a.str() + " with " + b.str() + " gives more than 2^63 elements");
  for (int i = 0; i < shape.ndim; ++i) {
    if (shape[i] == 1) continue;
    if (bc.ndim > 0) {
      const int j = bc.ndim - 1;
      // Merge into the previous kept dimension when stepping past all of
      // this one equals one step of the previous, for both inputs.
      if (bc.a_stride[j] == sa[i] * shape[i] && bc.b_stride[j] == sb[i] * shape[i]) {
        bc.shape[j] *= shape[i];
        bc.a_stride[j] = sa[i];
        bc.b_stride[j] = sb[i];
        continue;
      }
    }
    bc.shape[bc.ndim] = shape[i];
    bc.a_stride[bc.ndim] = sa[i];
    bc.b_stride[bc.ndim] = sb[i];
    ++bc.ndim;
  }
  if (bc.ndim == 0) {  // one element: a 1-long dimension reading index 0
    bc.ndim = 1;
    bc.shape[0] = 1;
  }
  return bc;
}

Tensor binary(BinaryOp op, const Tensor &a, const Tensor &b) {
  wait_host_inputs(a, b);
  check_same_device(a, b);
  check_same_dtype(a, b, binary_name(op));
  if (op == BinaryOp::Pow) check_float(a.dtype(), "pow");
  Shape shape;
  const Broadcast bc = broadcast(a.shape(), b.shape(), &shape);
  Tensor out = Tensor::empty(a.context(), shape, is_comparison(op) ? DType::U8 : a.dtype(), a.device());
  if (out.numel() > 0)
    a.backend().binary(a.device().index, BinaryArgs{op, a.dtype(), bc, a.data(), b.data(), out.data()});
  return out;
}

Tensor scalar(BinaryOp op, const Tensor &a, double s) {
  a.wait_host_access();
  check(!is_comparison(op), KILN_ERROR_INVALID_ARGUMENT,
        std::string("scalar ops are arithmetic; got the comparison ") + binary_name(op));
  if (op == BinaryOp::Pow) check_float(a.dtype(), "pow");
  check_value_fits(a.dtype(), s, "scalar");
  Tensor out = Tensor::empty(a.context(), a.shape(), a.dtype(), a.device());
  if (out.numel() > 0)
    a.backend().scalar(a.device().index, ScalarArgs{op, a.dtype(), a.numel(), a.data(), s, out.data()});
  return out;
}

Tensor unary(UnaryOp op, const Tensor &a, double alpha, double threshold) {
  a.wait_host_access();
  if (op != UnaryOp::Neg && op != UnaryOp::Abs && op != UnaryOp::Identity) check_float(a.dtype(), unary_name(op));
  Tensor out = Tensor::empty(a.context(), a.shape(), a.dtype(), a.device());
  if (out.numel() > 0)
    a.backend().unary(a.device().index, UnaryArgs{op, a.dtype(), a.numel(), a.data(), out.data(), alpha, threshold});
  return out;
}

Tensor softmax(const Tensor &a, int64_t dim, bool log) {
  a.wait_host_access();
  check_float(a.dtype(), log ? "log_softmax" : "softmax");
  const int d = normalize_dim(dim, a.ndim());
  Tensor out = Tensor::empty(a.context(), a.shape(), a.dtype(), a.device());
  if (out.numel() == 0) return out;
  const int64_t n = a.ndim() > 0 ? a.dim(d) : 1;
  const int64_t outer = product(a.shape(), 0, d), inner = product(a.shape(), d + 1, a.ndim());
  a.backend().softmax(a.device().index, SoftmaxArgs{a.dtype(), outer, n, inner, a.data(), out.data(), log});
  return out;
}

Tensor reduce(ReduceOp op, const Tensor &a, int64_t dim, bool keepdim) {
  a.wait_host_access();
  if (op == ReduceOp::Mean) check_float(a.dtype(), "mean");
  const int d = normalize_dim(dim, a.ndim());
  const int64_t n = a.ndim() > 0 ? a.dim(d) : 1;
  check(n > 0 || (op != ReduceOp::Max && op != ReduceOp::Argmax), KILN_ERROR_INVALID_ARGUMENT,
        std::string(reduce_name(op)) + " of an empty dimension (dim " + std::to_string(dim) + " of shape " +
            a.shape().str() + ") has no value");
  Shape shape;
  for (int i = 0; i < a.ndim(); ++i) {
    if (i != d) shape[shape.ndim++] = a.dim(i);
    else if (keepdim) shape[shape.ndim++] = 1;
  }
  const DType out_t = op == ReduceOp::Argmax ? DType::I64 : a.dtype();
  Tensor out = Tensor::empty(a.context(), shape, out_t, a.device());
  if (out.numel() == 0) return out;
  if (n == 0) {  // nothing to read: the sum of nothing is 0, its mean 0/0
    const double value = op == ReduceOp::Sum ? 0.0 : std::numeric_limits<double>::quiet_NaN();
    a.backend().fill(a.device().index, FillArgs{out_t, out.numel(), out.data(), value});
    return out;
  }
  const int64_t outer = product(a.shape(), 0, d), inner = product(a.shape(), d + 1, a.ndim());
  a.backend().reduce(a.device().index, ReduceArgs{op, a.dtype(), outer, n, inner, a.data(), out.data()});
  return out;
}

Tensor matmul(const Tensor &a, const Tensor &b) {
  wait_host_inputs(a, b);
  check_same_device(a, b);
  check_same_dtype(a, b, "matmul");
  check_float(a.dtype(), "matmul");
  check(a.ndim() >= 1 && a.ndim() <= 2 && b.ndim() >= 1 && b.ndim() <= 2, KILN_ERROR_SHAPE_MISMATCH,
        "matmul needs 1-D or 2-D operands, got shapes " + a.shape().str() + " and " + b.shape().str());
  // A 1-D a is a row [1, k], a 1-D b a column [k, 1]; those 1s are dropped
  // from the result.
  const int64_t m = a.ndim() == 2 ? a.dim(0) : 1, k = a.ndim() == 2 ? a.dim(1) : a.dim(0);
  const int64_t kb = b.dim(0), n = b.ndim() == 2 ? b.dim(1) : 1;
  check(k == kb, KILN_ERROR_SHAPE_MISMATCH,
        "matmul inner sizes differ: " + a.shape().str() + " x " + b.shape().str() + " (" + std::to_string(k) +
            " != " + std::to_string(kb) + ")");
  Shape shape;
  if (a.ndim() == 2) shape[shape.ndim++] = m;
  if (b.ndim() == 2) shape[shape.ndim++] = n;
  Tensor out = Tensor::empty(a.context(), shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  if (k == 0) {  // an empty sum: BLAS libraries differ on whether k = 0 is legal
    a.backend().fill(a.device().index, FillArgs{a.dtype(), out.numel(), out.data(), 0.0});
    return out;
  }
  GemmArgs g;
  g.t = a.dtype();
  g.m = m, g.n = n, g.k = k;
  g.a = a.data(), g.b = b.data(), g.c = out.data();
  a.backend().gemm(a.device().index, g);
  return out;
}

Tensor cast(const Tensor &a, DType dtype) {
  a.wait_host_access();
  if (dtype == a.dtype()) return a.clone();
  Tensor out = Tensor::empty(a.context(), a.shape(), dtype, a.device());
  if (out.numel() > 0) a.backend().cast(a.device().index, CastArgs{a.dtype(), dtype, a.numel(), a.data(), out.data()});
  return out;
}

}  // namespace kiln
