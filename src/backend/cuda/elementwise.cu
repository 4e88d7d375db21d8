// Elementwise tensor kernels: fill, arange, cast, unary, scalar and broadcast
// binary ops. All are grid-stride loops with 64-bit indices; half types are
// computed in f32 (device_math.cuh).
#include "backend/cuda/device_math.cuh"

namespace kiln::cuda {
namespace {

// Fills with a constant (tensor creation: zeros, ones, full).
template <class T> __global__ void fill_kernel(int64_t n, T *out, double value) {
  const T v = store<T>(from_double<T>(value));
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = v;
}

// start + i * step computed in double, as the CPU does, then rounded once.
template <class T> __global__ void arange_kernel(int64_t n, T *out, double start, double step) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = store<T>(from_double<T>(start + double(i) * step));
}

// Any dtype to any dtype, as the CPU: the value in From's compute type goes
// to To's compute type (floats to integers saturate, integers wrap), then is
// stored (f16/bf16 rounded once from f32).
template <class From, class To> __global__ void cast_kernel(int64_t n, const From *in, To *out) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    if constexpr (std::is_integral_v<To>) out[i] = store<To>(load(in, i));
    else out[i] = store<To>(Acc<To>(load(in, i)));
  }
}

template <class T>
__global__ void unary_kernel(UnaryOp op, int64_t n, const T *in, T *out, double alpha, double threshold) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    out[i] = store<T>(unary_op<T>(op, load(in, i), alpha, threshold));
}

// a^b for integers by squaring, wrapping; negative powers truncate to 0
// except for bases 1 and -1 (as the CPU backend).
__device__ __forceinline__ int64_t integer_pow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  int64_t result = 1;
  for (; b != 0; b >>= 1) {
    if (b & 1) result = wrap_mul(result, a);
    a = wrap_mul(a, a);
  }
  return result;
}

// a op b in compute type C. Integers wrap (i64 compute, stored narrower, gives
// the narrow type's wrapping); integer division by zero gives 0. maximum and
// minimum propagate NaN as torch.maximum does.
template <class C> __device__ __forceinline__ C binary_op(BinaryOp op, C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    switch (op) {
      case BinaryOp::Add: return wrap_add(a, b);
      case BinaryOp::Sub: return wrap_sub(a, b);
      case BinaryOp::Mul: return wrap_mul(a, b);
      case BinaryOp::Div: return b == 0 ? 0 : b == -1 ? wrap_sub(0, a) : a / b;  // INT_MIN / -1 overflows
      case BinaryOp::Maximum: return a > b ? a : b;
      case BinaryOp::Minimum: return a < b ? a : b;
      case BinaryOp::Pow: return integer_pow(a, b);
      default: return 0;  // comparisons go through compare()
    }
  } else {
    switch (op) {
      case BinaryOp::Add: return a + b;
      case BinaryOp::Sub: return a - b;
      case BinaryOp::Mul: return a * b;
      case BinaryOp::Div: return a / b;
      case BinaryOp::Maximum: return is_nan(a) ? a : is_nan(b) ? b : a > b ? a : b;
      case BinaryOp::Minimum: return is_nan(a) ? a : is_nan(b) ? b : a < b ? a : b;
      case BinaryOp::Pow: return pow(a, b);
      default: return C(0);
    }
  }
}

template <class C> __device__ __forceinline__ uint8_t compare(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    default: return 0;
  }
}

// The scalar is first rounded to a's dtype, as the CPU backend does.
template <class T> __global__ void scalar_kernel(BinaryOp op, int64_t n, const T *a, double s, T *out) {
  const T stored = store<T>(from_double<T>(s));
  const Acc<T> b = load(&stored, 0);
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = store<T>(binary_op(op, load(a, i), b));
}

// Broadcast binary op. The host collapses the shape first, so the common
// cases (same shape, tensor op scalar) are 1-D and skip the index division.
template <class T, bool kCompare>
__global__ void binary_kernel(BinaryOp op, Broadcast bc, int64_t n, const T *a, const T *b,
                              std::conditional_t<kCompare, uint8_t, T> *out) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t ia = 0, ib = 0;
    if (bc.ndim == 1) {
      ia = i * bc.a_stride[0];
      ib = i * bc.b_stride[0];
    } else {
      int64_t rest = i;
      for (int d = bc.ndim - 1; d >= 0; --d) {
        int64_t k = rest % bc.shape[d];
        rest /= bc.shape[d];
        ia += k * bc.a_stride[d];
        ib += k * bc.b_stride[d];
      }
    }
    if constexpr (kCompare) out[i] = compare(op, load(a, ia), load(b, ib));
    else out[i] = store<T>(binary_op(op, load(a, ia), load(b, ib)));
  }
}

// Drops size-1 dimensions and merges neighbours that are contiguous in out,
// a and b alike, so that e.g. [64, 128] + [64, 128] becomes one dimension.
Broadcast collapse(const Broadcast &bc) {
  Broadcast c;
  for (int d = 0; d < bc.ndim; ++d) {
    if (bc.shape[d] == 1) continue;
    int last = c.ndim - 1;
    if (last >= 0 && c.a_stride[last] == bc.a_stride[d] * bc.shape[d] &&
        c.b_stride[last] == bc.b_stride[d] * bc.shape[d]) {
      c.shape[last] *= bc.shape[d];
      c.a_stride[last] = bc.a_stride[d];
      c.b_stride[last] = bc.b_stride[d];
    } else {
      c.shape[c.ndim] = bc.shape[d];
      c.a_stride[c.ndim] = bc.a_stride[d];
      c.b_stride[c.ndim] = bc.b_stride[d];
      ++c.ndim;
    }
  }
  return c;
}

bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

}  // namespace

void fill(const Launch &L, const FillArgs &args) {
  const DType t = args.t;
  const int64_t n = args.n;
  void *out = args.out;
  const double value = args.value;
  if (n <= 0) return;
  dispatch_all(t, "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_kernel<T><<<blocks_for(L, n), kThreads, 0, L.stream>>>(n, static_cast<T *>(out), value);
  });
  KILN_CUDA_LAUNCHED("fill");
}

void arange(const Launch &L, const ArangeArgs &args) {
  const DType t = args.t;
  const int64_t n = args.n;
  void *out = args.out;
  const double start = args.start, step = args.step;
  if (n <= 0) return;
  dispatch_all(t, "arange", [&](auto tag) {
    using T = typename decltype(tag)::type;
    arange_kernel<T><<<blocks_for(L, n), kThreads, 0, L.stream>>>(n, static_cast<T *>(out), start, step);
  });
  KILN_CUDA_LAUNCHED("arange");
}

void cast(const Launch &L, const CastArgs &args) {
  const DType from = args.from, to = args.to;
  const int64_t n = args.n;
  const void *in = args.in;
  void *out = args.out;
  if (n <= 0) return;
  dispatch_all(from, "cast", [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    dispatch_all(to, "cast", [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      cast_kernel<From, To><<<blocks_for(L, n), kThreads, 0, L.stream>>>(n, static_cast<const From *>(in),
                                                                          static_cast<To *>(out));
    });
  });
  KILN_CUDA_LAUNCHED("cast");
}

void unary(const Launch &L, const UnaryArgs &args) {
  const UnaryOp op = args.op;
  const DType t = args.t;
  const int64_t n = args.n;
  const void *in = args.in;
  void *out = args.out;
  const double alpha = args.alpha, threshold = args.threshold;
  if (n <= 0) return;
  dispatch_all(t, "unary op", [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_kernel<T><<<blocks_for(L, n), kThreads, 0, L.stream>>>(op, n, static_cast<const T *>(in),
                                                                 static_cast<T *>(out), alpha, threshold);
  });
  KILN_CUDA_LAUNCHED("unary");
}

void scalar(const Launch &L, const ScalarArgs &args) {
  const BinaryOp op = args.op;
  const DType t = args.t;
  const int64_t n = args.n;
  const void *a = args.a;
  const double s = args.s;
  void *out = args.out;
  if (n <= 0) return;
  dispatch_all(t, "scalar op", [&](auto tag) {
    using T = typename decltype(tag)::type;
    scalar_kernel<T><<<blocks_for(L, n), kThreads, 0, L.stream>>>(op, n, static_cast<const T *>(a), s,
                                                                  static_cast<T *>(out));
  });
  KILN_CUDA_LAUNCHED("scalar");
}

void binary(const Launch &L, const BinaryArgs &args) {
  const BinaryOp op = args.op;
  const DType t = args.t;
  const Broadcast &bc = args.bc;
  const void *a = args.a, *b = args.b;
  void *out = args.out;
  int64_t n = 1;
  for (int d = 0; d < bc.ndim; ++d) n *= bc.shape[d];
  if (n <= 0) return;
  const Broadcast c = collapse(bc);
  dispatch_all(t, "binary op", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *pa = static_cast<const T *>(a), *pb = static_cast<const T *>(b);
    if (is_comparison(op))
      binary_kernel<T, true><<<blocks_for(L, n), kThreads, 0, L.stream>>>(op, c, n, pa, pb, static_cast<uint8_t *>(out));
    else
      binary_kernel<T, false><<<blocks_for(L, n), kThreads, 0, L.stream>>>(op, c, n, pa, pb, static_cast<T *>(out));
  });
  KILN_CUDA_LAUNCHED("binary");
}

}  // namespace kiln::cuda
