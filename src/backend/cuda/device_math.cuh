// What every kernel file shares: the dtype dispatch, load/store with f16/bf16
// computed in f32, the activations (so unary, bias_act and act_backward agree
// exactly), warp/block reductions and the grid size of grid-stride loops.
// The activations and the bf16 rounding are core/formulas' (the CPU
// backend's too), so the CPU tests exercise the same arithmetic.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.hpp"
#include "core/formulas/activations.hpp"
#include "core/formulas/bf16.hpp"

namespace kiln::cuda {

constexpr int kThreads = 256;  // block size of every 1-D kernel (a multiple of 32)
constexpr int kWarp = 32;

// ---- dtypes ----------------------------------------------------------------

// The type a stored value is computed in: f16/bf16 in f32, integers in i64.
template <class T> struct AccOf { using type = T; };
template <> struct AccOf<__half> { using type = float; };
template <> struct AccOf<__nv_bfloat16> { using type = float; };
template <> struct AccOf<int32_t> { using type = int64_t; };
template <> struct AccOf<uint8_t> { using type = int64_t; };
template <class T> using Acc = typename AccOf<T>::type;

template <class T> __device__ __forceinline__ Acc<T> load(const T *p, int64_t i) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(p[i]);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(p[i]);
  else return Acc<T>(p[i]);
}

// Float -> integer T as the CPU backend converts: toward zero, saturating at
// T's range, NaN to 0 (a plain C cast would be undefined out of range).
template <class T> __device__ __forceinline__ T saturate_cast(double v) {
  constexpr bool kSigned = T(-1) < T(0);
  constexpr int kBits = 8 * int(sizeof(T)) - (kSigned ? 1 : 0);
  constexpr double kTooBig = double(uint64_t(1) << kBits);  // one past the largest value, exact
  if (!(v == v)) return T(0);
  if (v <= (kSigned ? -kTooBig : 0.0)) return kSigned ? T(uint64_t(1) << kBits) : T(0);  // two's complement minimum
  if (v >= kTooBig) return T((uint64_t(1) << kBits) - 1);
  return T(v);
}

// Into the stored type: f16/bf16 round to nearest even (bf16 with the host's
// formula, formulas/bf16.hpp, NaN payloads included), floats to integers
// saturate, integers to narrower integers wrap.
template <class T, class V> __device__ __forceinline__ T store(V v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(float(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat16_raw raw;
    raw.x = formulas::bf16_bits_from_f32_bits(__float_as_uint(float(v)));
    return __nv_bfloat16(raw);
  }
  else if constexpr (std::is_integral_v<T> && std::is_floating_point_v<V>) return saturate_cast<T>(double(v));
  else return T(v);
}

// A host double (a fill value, a scalar operand) in T's compute type.
template <class T> __device__ __forceinline__ Acc<T> from_double(double v) {
  if constexpr (std::is_integral_v<T>) return saturate_cast<T>(v);
  else return Acc<T>(v);
}

// Two's complement arithmetic without signed-overflow undefined behaviour.
__device__ __forceinline__ int64_t wrap_add(int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }
__device__ __forceinline__ int64_t wrap_sub(int64_t a, int64_t b) { return int64_t(uint64_t(a) - uint64_t(b)); }
__device__ __forceinline__ int64_t wrap_mul(int64_t a, int64_t b) { return int64_t(uint64_t(a) * uint64_t(b)); }

template <class C> __device__ __forceinline__ bool is_nan(C x) {
  if constexpr (std::is_integral_v<C>) return false;
  else return isnan(x);
}

template <class T> struct Tag { using type = T; };

// Calls f(Tag<T>{}) for the C++ type of dtype t; `what` names the operation
// for the error a dtype it does not support gives.
template <class F> void dispatch_float(DType t, const char *what, F &&f) {
  switch (t) {
    case DType::F32: return f(Tag<float>{});
    case DType::F64: return f(Tag<double>{});
    case DType::F16: return f(Tag<__half>{});
    case DType::BF16: return f(Tag<__nv_bfloat16>{});
    default: fail(KILN_ERROR_NOT_SUPPORTED, std::string(what) + " on CUDA needs a float dtype, not " + dtype_name(t));
  }
}

template <class F> void dispatch_all(DType t, const char *what, F &&f) {
  switch (t) {
    case DType::I32: return f(Tag<int32_t>{});
    case DType::I64: return f(Tag<int64_t>{});
    case DType::U8: return f(Tag<uint8_t>{});
    default: return dispatch_float(t, what, f);
  }
}

// ---- launch geometry ----------------------------------------------------------

// Blocks for a grid-stride loop over `work` items, `per_block` items per pass.
inline unsigned blocks_for(const Launch &L, int64_t work, int64_t per_block = kThreads) {
  int64_t b = (work + per_block - 1) / per_block;
  return unsigned(b < 1 ? 1 : b > L.max_blocks ? L.max_blocks : b);
}

__device__ __forceinline__ int64_t global_thread() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_threads() { return int64_t(gridDim.x) * blockDim.x; }
__device__ __forceinline__ int64_t global_warp() { return global_thread() / kWarp; }
__device__ __forceinline__ int64_t grid_warps() { return grid_threads() / kWarp; }
__device__ __forceinline__ int lane() { return threadIdx.x % kWarp; }

// ---- activations (core/formulas/activations.hpp) ------------------------------------

// One unary op on a value of stored type T, in its compute type C. NaN stays
// NaN (hence x < 0 ? ... : x). Integers wrap for Neg/Abs and take the other
// ops through double, saturating back.
// alpha and threshold are the op's parameters (core/backend.hpp's UnaryOp).
template <class T, class C = Acc<T>> __device__ C unary_op(UnaryOp op, C x, double alpha, double threshold) {
  if constexpr (std::is_integral_v<C>) {
    switch (op) {
      case UnaryOp::Neg: return wrap_sub(0, x);
      case UnaryOp::Abs: return x < 0 ? wrap_sub(0, x) : x;
      case UnaryOp::Relu: return x < 0 ? 0 : x;
      case UnaryOp::Identity: return x;
      default: return saturate_cast<T>(unary_op<double>(op, double(x), alpha, threshold));
    }
  } else {
    switch (op) {
      case UnaryOp::Neg: return -x;
      case UnaryOp::Abs: return fabs(x);
      case UnaryOp::Exp: return exp(x);
      case UnaryOp::Log: return log(x);
      case UnaryOp::Sqrt: return sqrt(x);
      case UnaryOp::Relu: return formulas::relu(x);
      case UnaryOp::Gelu: return formulas::gelu(x);
      case UnaryOp::Tanh: return formulas::tanh_act(x);
      case UnaryOp::Sigmoid: return formulas::sigmoid(x);
      case UnaryOp::LeakyRelu: return formulas::leaky_relu(x, C(alpha));
      case UnaryOp::Identity: return x;
      case UnaryOp::Elu: return formulas::elu(x, C(alpha));
      case UnaryOp::Selu: return formulas::selu(x);
      case UnaryOp::Softplus: return formulas::softplus(x, C(alpha), C(threshold));
    }
    return x;
  }
}

// act'(.) * dy from the pre-activation (act_grad_reads_pre) or the output y
// (the others).
template <class C>
__device__ __forceinline__ C act_grad(UnaryOp act, C dy, C pre, C y, double alpha, double threshold) {
  switch (act) {
    case UnaryOp::Relu: return formulas::relu_grad(dy, y);
    case UnaryOp::LeakyRelu: return formulas::leaky_relu_grad(dy, y, C(alpha));
    case UnaryOp::Tanh: return formulas::tanh_grad(dy, y);
    case UnaryOp::Sigmoid: return formulas::sigmoid_grad(dy, y);
    case UnaryOp::Gelu: return formulas::gelu_grad(dy, pre);
    case UnaryOp::Elu: return formulas::elu_grad(dy, pre, C(alpha));
    case UnaryOp::Selu: return formulas::selu_grad(dy, pre);
    case UnaryOp::Softplus: return formulas::softplus_grad(dy, pre, C(alpha), C(threshold));
    default: return dy;
  }
}

// ---- reductions -----------------------------------------------------------------

template <class V> __device__ __forceinline__ V warp_sum(V v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class V> __device__ __forceinline__ V warp_max(V v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));  // NaN-ignoring: callers see NaN through their sums
  return v;
}

// Sums v over the block and adds the total into *dst with one atomic, so a
// loss over n elements costs n / blockDim atomics. Every thread of the block
// must call it (it synchronises); it may be called again right after.
__device__ __forceinline__ void block_atomic_add(double v, double *dst) {
  __shared__ double partial[kThreads / kWarp];
  v = warp_sum(v);
  if (lane() == 0) partial[threadIdx.x / kWarp] = v;
  __syncthreads();
  if (threadIdx.x < kWarp) {
    v = threadIdx.x < blockDim.x / kWarp ? partial[threadIdx.x] : 0.0;
    v = warp_sum(v);
    if (threadIdx.x == 0 && v != 0.0) atomicAdd(dst, v);
  }
  __syncthreads();
}

}  // namespace kiln::cuda
