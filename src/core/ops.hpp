// Tensor math as free functions over kiln::Tensor. Each validates its inputs
// (devices, dtypes, shapes), allocates a contiguous result on the inputs'
// device and dispatches one backend kernel, so backends never re-check.
//
// Errors, as the public API documents them: tensors on different devices ->
// INVALID_ARGUMENT; two dtypes, or a dtype the op does not take ->
// DTYPE_MISMATCH; shapes that do not fit -> SHAPE_MISMATCH; a dimension out
// of range -> INVALID_ARGUMENT. Every op accepts tensors without elements.
#pragma once

#include "core/backend.hpp"
#include "core/tensor.hpp"

namespace kiln {

// Throws INVALID_ARGUMENT "tensors are on different devices (cpu and cuda:0)"
// unless a and b are on one device.
void check_same_device(const Tensor &a, const Tensor &b);
// Throws DTYPE_MISMATCH naming `op` unless dtype is a float dtype.
void check_float(DType dtype, const char *op);
// Maps dim in [-ndim, ndim) to [0, ndim) (INVALID_ARGUMENT otherwise). A 0-d
// tensor has one dimension here, as in PyTorch.
int normalize_dim(int64_t dim, int ndim);

// NumPy broadcasting of shapes a and b (SHAPE_MISMATCH naming both when they
// do not broadcast). Sets *out to the result's shape and returns the strides
// kernels read with. The descriptor is simplified for speed: size-1
// dimensions are dropped and runs of dimensions both inputs read
// contiguously are merged, so equal shapes become one flat dimension. It
// always has at least one dimension.
Broadcast broadcast(const Shape &a, const Shape &b, Shape *out);

// a op b elementwise with broadcasting. Arithmetic keeps the dtype (Pow needs
// a float dtype); comparisons (Eq..Ge) give U8 0/1.
Tensor binary(BinaryOp op, const Tensor &a, const Tensor &b);
// a op s for the arithmetic ops; s must fit a's dtype (INVALID_ARGUMENT).
Tensor scalar(BinaryOp op, const Tensor &a, double s);
// op(a). Neg, Abs and Identity take every dtype, the rest float dtypes only.
// alpha and threshold are op's parameters (core/backend.hpp's UnaryOp).
Tensor unary(UnaryOp op, const Tensor &a, double alpha = 0.0, double threshold = 0.0);
// Softmax, or log-softmax when log, along dim. Float dtypes.
Tensor softmax(const Tensor &a, int64_t dim, bool log);
// Reduces dim (kept with size 1 when keepdim). Argmax gives I64, the others
// a's dtype; Mean needs a float dtype. An empty dim sums to 0 and averages to
// NaN; Max and Argmax of one are INVALID_ARGUMENT.
Tensor reduce(ReduceOp op, const Tensor &a, int64_t dim, bool keepdim);
// NumPy matmul of 1-D and 2-D float tensors: [m,k]x[k,n] -> [m,n],
// [k]x[k,n] -> [n], [m,k]x[k] -> [m], [k]x[k] -> [].
Tensor matmul(const Tensor &a, const Tensor &b);
// A copy converted to dtype (float to int truncates toward zero).
Tensor cast(const Tensor &a, DType dtype);

}  // namespace kiln
