// Reductions and softmax over the middle axis of [outer, n, inner]. When
// inner == 1 (the last axis, the common case) one warp owns a row and reads
// it coalesced; otherwise one thread owns an (outer, inner) column and the
// threads of a warp read neighbouring columns, again coalesced.
#include <cmath>

#include "backend/cuda/device_math.cuh"

namespace kiln::cuda {
namespace {

// Argmax order: NaN beats everything (as torch.argmax), then the larger
// value, then the lower index (the first occurrence wins).
template <class C> __device__ __forceinline__ bool better(C v, int64_t i, C best, int64_t best_i) {
  if (is_nan(v) || is_nan(best)) return is_nan(v) && (!is_nan(best) || i < best_i);
  return v > best || (v == best && i < best_i);
}

// Argmax of (best, best_i) over the warp; every lane gets the winner.
template <class C> __device__ __forceinline__ void warp_argmax(C &best, int64_t &best_i) {
  for (int o = kWarp / 2; o > 0; o /= 2) {
    C v = __shfl_xor_sync(0xffffffffu, best, o);
    int64_t i = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (better(v, i, best, best_i)) best = v, best_i = i;
  }
}

// Sums accumulate in double for floats and in wrapping 64-bit for integers,
// as the CPU backend; finish() divides for the mean (a float mean of nothing
// is NaN, as torch; an integer one 0) and stores.
template <class T> using Sum = std::conditional_t<std::is_integral_v<T>, uint64_t, double>;

template <class T> __device__ __forceinline__ Sum<T> to_sum(Acc<T> v) {
  if constexpr (std::is_integral_v<T>) return uint64_t(int64_t(v));
  else return double(v);
}

template <class T> __device__ __forceinline__ T finish(Sum<T> s, int64_t n, bool mean) {
  if constexpr (std::is_integral_v<T>) {
    int64_t total = int64_t(s);
    return T(mean ? (n > 0 ? total / n : 0) : total);
  } else {
    return store<T>(Acc<T>(mean ? s / double(n) : s));
  }
}

// Sum / Mean / Max / Argmax of each row of in[rows, n] by one warp.
template <class T> __global__ void reduce_rows_kernel(ReduceOp op, int64_t rows, int64_t n, const T *in, void *out) {
  using C = Acc<T>;
  for (int64_t r = global_warp(); r < rows; r += grid_warps()) {
    const T *x = in + r * n;
    if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
      Sum<T> s = 0;
      for (int64_t k = lane(); k < n; k += kWarp) s += to_sum<T>(load(x, k));
      s = warp_sum(s);
      if (lane() == 0) static_cast<T *>(out)[r] = finish<T>(s, n, op == ReduceOp::Mean);
    } else {  // n > 0: every lane starts from element 0
      C best = load(x, 0);
      int64_t best_i = 0;
      for (int64_t k = lane(); k < n; k += kWarp) {
        C v = load(x, k);
        if (better(v, k, best, best_i)) best = v, best_i = k;
      }
      warp_argmax(best, best_i);
      if (lane() == 0) {
        if (op == ReduceOp::Max) static_cast<T *>(out)[r] = store<T>(best);
        else static_cast<int64_t *>(out)[r] = best_i;
      }
    }
  }
}

// The same over n for each of outer * inner columns, one thread each.
template <class T>
__global__ void reduce_cols_kernel(ReduceOp op, int64_t outer, int64_t n, int64_t inner, const T *in, void *out) {
  using C = Acc<T>;
  for (int64_t o = global_thread(); o < outer * inner; o += grid_threads()) {
    const T *x = in + (o / inner) * n * inner + o % inner;
    if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
      Sum<T> s = 0;
      for (int64_t k = 0; k < n; ++k) s += to_sum<T>(load(x, k * inner));
      static_cast<T *>(out)[o] = finish<T>(s, n, op == ReduceOp::Mean);
    } else {
      C best = load(x, 0);
      int64_t best_i = 0;
      for (int64_t k = 1; k < n; ++k) {
        C v = load(x, k * inner);
        if (better(v, k, best, best_i)) best = v, best_i = k;
      }
      if (op == ReduceOp::Max) static_cast<T *>(out)[o] = store<T>(best);
      else static_cast<int64_t *>(out)[o] = best_i;
    }
  }
}

// Numerically stable (log-)softmax of each row by one warp: max, sum of
// exp(x - max) (in double, as the CPU), then write; the row is re-read from
// L1/L2, not kept.
template <class T> __global__ void softmax_rows_kernel(int64_t rows, int64_t n, const T *in, T *out, bool log_out) {
  using C = Acc<T>;
  for (int64_t r = global_warp(); r < rows; r += grid_warps()) {
    const T *x = in + r * n;
    C m = -INFINITY;
    for (int64_t k = lane(); k < n; k += kWarp) m = fmax(m, load(x, k));
    m = warp_max(m);
    double s = 0;
    for (int64_t k = lane(); k < n; k += kWarp) s += double(exp(load(x, k) - m));
    s = warp_sum(s);
    const C log_s = C(log(s)), inv_s = C(1.0 / s);
    for (int64_t k = lane(); k < n; k += kWarp) {
      C z = load(x, k) - m;
      out[r * n + k] = store<T>(log_out ? z - log_s : exp(z) * inv_s);
    }
  }
}

template <class T>
__global__ void softmax_cols_kernel(int64_t outer, int64_t n, int64_t inner, const T *in, T *out, bool log_out) {
  using C = Acc<T>;
  for (int64_t o = global_thread(); o < outer * inner; o += grid_threads()) {
    const int64_t base = (o / inner) * n * inner + o % inner;
    C m = -INFINITY;
    double s = 0;
    for (int64_t k = 0; k < n; ++k) m = fmax(m, load(in, base + k * inner));
    for (int64_t k = 0; k < n; ++k) s += double(exp(load(in, base + k * inner) - m));
    const C log_s = C(log(s)), inv_s = C(1.0 / s);
    for (int64_t k = 0; k < n; ++k) {
      C z = load(in, base + k * inner) - m;
      out[base + k * inner] = store<T>(log_out ? z - log_s : exp(z) * inv_s);
    }
  }
}

}  // namespace

void reduce(const Launch &L, const ReduceArgs &args) {
  const ReduceOp op = args.op;
  const DType t = args.t;
  const int64_t outer = args.outer, n = args.n, inner = args.inner;
  const void *in = args.in;
  void *out = args.out;
  if (outer <= 0 || inner <= 0) return;
  check(n > 0 || op == ReduceOp::Sum || op == ReduceOp::Mean, KILN_ERROR_INVALID_ARGUMENT,
        "max/argmax over an empty dimension");
  dispatch_all(t, "reduce", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (inner == 1)
      reduce_rows_kernel<T><<<blocks_for(L, outer, kThreads / kWarp), kThreads, 0, L.stream>>>(
          op, outer, n, static_cast<const T *>(in), out);
    else
      reduce_cols_kernel<T><<<blocks_for(L, outer * inner), kThreads, 0, L.stream>>>(
          op, outer, n, inner, static_cast<const T *>(in), out);
  });
  KILN_CUDA_LAUNCHED("reduce");
}

void softmax(const Launch &L, const SoftmaxArgs &args) {
  const DType t = args.t;
  const int64_t outer = args.outer, n = args.n, inner = args.inner;
  const void *in = args.in;
  void *out = args.out;
  const bool log = args.log;
  if (outer <= 0 || n <= 0 || inner <= 0) return;
  dispatch_float(t, "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (inner == 1)
      softmax_rows_kernel<T><<<blocks_for(L, outer, kThreads / kWarp), kThreads, 0, L.stream>>>(
          outer, n, static_cast<const T *>(in), static_cast<T *>(out), log);
    else
      softmax_cols_kernel<T><<<blocks_for(L, outer * inner), kThreads, 0, L.stream>>>(
          outer, n, inner, static_cast<const T *>(in), static_cast<T *>(out), log);
  });
  KILN_CUDA_LAUNCHED("softmax");
}

}  // namespace kiln::cuda
