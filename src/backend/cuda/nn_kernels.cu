// Neural-network kernels of the MLP's forward and backward passes: bias +
// activation, activation gradients, bias gradients, the fused losses,
// dropout and batch assembly. Losses add into double `stats` with one atomic
// per block, so a training step never waits for the device.
#include "backend/cuda/device_math.cuh"
#include "core/formulas/losses.hpp"
#include "core/rng.hpp"

namespace kiln::cuda {
namespace {

// y = act(y + bias) in place, keeping y + bias in `pre` when asked (the
// backward of GELU, ELU, SELU and Softplus needs it). Runs after the GEMM of
// a Linear layer.
template <class T>
__global__ void bias_act_kernel(int64_t rows, int64_t cols, T *y, const T *bias, UnaryOp act, double alpha,
                                double threshold, T *pre) {
  using C = Acc<T>;
  for (int64_t i = global_thread(); i < rows * cols; i += grid_threads()) {
    C v = load(y, i);
    if (bias) v += load(bias, i % cols);
    if (pre) pre[i] = store<T>(v);
    y[i] = store<T>(unary_op<T>(act, v, alpha, threshold));
  }
}

template <class T>
__global__ void act_backward_kernel(int64_t n, UnaryOp act, double alpha, double threshold, const T *dy, const T *pre,
                                    const T *y, T *dx) {
  using C = Acc<T>;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    C p = pre ? load(pre, i) : C(0), out = y ? load(y, i) : C(0);
    dx[i] = store<T>(act_grad(act, load(dy, i), p, out, alpha, threshold));
  }
}

// db[c] = beta * db[c] + sum_r dy[r, c]: a block owns 32 neighbouring
// columns (coalesced reads along a row) and kBiasRows threads split the rows;
// partial sums (in double, as the CPU) meet in shared memory. Deterministic:
// no atomics.
constexpr int kBiasRows = kThreads / kWarp;

template <class T> __global__ void bias_grad_kernel(int64_t rows, int64_t cols, const T *dy, T *db, double beta) {
  __shared__ double partial[kBiasRows][kWarp];
  for (int64_t c0 = int64_t(blockIdx.x) * kWarp; c0 < cols; c0 += int64_t(gridDim.x) * kWarp) {
    const int64_t c = c0 + threadIdx.x;
    double s = 0;
    if (c < cols)
      for (int64_t r = threadIdx.y; r < rows; r += kBiasRows) s += double(load(dy, r * cols + c));
    partial[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
      for (int k = 1; k < kBiasRows; ++k) s += partial[k][threadIdx.x];
      const double old = beta == 0.0 ? 0.0 : beta * double(load(db, c));  // beta 0: db may be uninitialised
      db[c] = store<T>(Acc<T>(old + s));
    }
    __syncthreads();  // partial is rewritten by the next tile
  }
}

// Fused softmax cross-entropy, one warp per row: max and argmax, log-sum-exp,
// then the gradient (softmax - q) * scale, q the label's one-hot mixed with
// the uniform distribution by `smoothing` (LossArgs). All reads of a row
// finish at the warp reductions before any write, so dlogits may alias
// logits. The argmax is the CPU's: the first maximum, NaN never wins.
template <class T>
__global__ void cross_entropy_kernel(int64_t rows, int64_t cols, const T *logits, const int64_t *labels,
                                     double grad_scale, double smoothing, T *dlogits, double *stats) {
  using C = Acc<T>;
  const auto target = formulas::smoothed_target<C>(grad_scale, smoothing, cols);
  double loss = 0, correct = 0, invalid = 0;
  for (int64_t r = global_warp(); r < rows; r += grid_warps()) {
    const T *x = logits + r * cols;
    const int64_t label = labels[r];
    const bool valid = label >= 0 && label < cols;
    const C x_label = valid ? load(x, label) : C(0);
    C best = load(x, 0);
    int64_t best_i = 0;
    for (int64_t k = lane(); k < cols; k += kWarp) {
      C v = load(x, k);
      if (v > best) best = v, best_i = k;
    }
    for (int o = kWarp / 2; o > 0; o /= 2) {
      C v = __shfl_xor_sync(0xffffffffu, best, o);
      int64_t i = __shfl_xor_sync(0xffffffffu, best_i, o);
      if (v > best || (v == best && i < best_i)) best = v, best_i = i;
    }
    C s = 0;
    double shifted = 0;  // sum_k (x_k - best), for the smoothed loss
    for (int64_t k = lane(); k < cols; k += kWarp) {
      s += exp(load(x, k) - best);
      if (smoothing != 0) shifted += double(load(x, k) - best);
    }
    s = warp_sum(s);
    if (smoothing != 0) shifted = warp_sum(shifted);
    if (lane() == 0) {
      if (valid) {
        loss += formulas::cross_entropy_row_loss(s, x_label, best, smoothing, shifted / double(cols));
        correct += best_i == label;
      } else {
        invalid += 1;
      }
    }
    if (dlogits) {
      const C factor = C(grad_scale) / s;
      T *d = dlogits + r * cols;
      for (int64_t k = lane(); k < cols; k += kWarp)
        d[k] = store<T>(valid ? formulas::cross_entropy_grad(C(exp(load(x, k) - best)), factor, k == label, target)
                              : C(0));
    }
  }
  block_atomic_add(loss, stats + 0);
  block_atomic_add(correct, stats + 1);
  block_atomic_add(invalid, stats + 2);
}

template <class T>
__global__ void mse_kernel(int64_t n, const T *pred, const T *target, double grad_scale, T *dpred, double *stats) {
  using C = Acc<T>;
  const C scale = C(2 * grad_scale);
  double sum = 0;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const formulas::LossTerm<C> term = formulas::mse_term(C(load(pred, i)), C(load(target, i)), scale);
    sum += term.loss;
    if (dpred) dpred[i] = store<T>(term.grad);
  }
  block_atomic_add(sum, stats);
}

// formulas::bce_with_logits_term: stable for any x.
template <class T>
__global__ void bce_kernel(int64_t n, const T *logits, const T *target, double grad_scale, T *dlogits, double *stats) {
  using C = Acc<T>;
  const C scale = C(grad_scale);
  double sum = 0;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const formulas::LossTerm<C> term = formulas::bce_with_logits_term(C(load(logits, i)), C(load(target, i)), scale);
    sum += term.loss;
    if (dlogits) dlogits[i] = store<T>(term.grad);
  }
  block_atomic_add(sum, stats);
}

// Inverted dropout with the mask a pure function of (seed, i): the same bits
// as the CPU backend, whatever the launch geometry. Inside a training step the
// seed is derived here, on the device, from the step's block, so a replayed
// CUDA graph draws new masks at every step. mask may be null (inference-style
// use that needs no backward).
template <class T>
__global__ void dropout_kernel(int64_t n, const T *x, T *y, uint8_t *mask, double keep_p, double scale,
                               const StepParams *step, uint64_t stream) {
  using C = Acc<T>;
  const uint64_t seed = step ? rng_bits(step->dropout_seed, stream) : stream;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const bool keep = rng_uniform(seed, uint64_t(i)) < keep_p;
    if (mask) mask[i] = keep;
    y[i] = store<T>(keep ? load(x, i) * C(scale) : C(0));
  }
}

template <class T>
__global__ void dropout_backward_kernel(int64_t n, const T *dy, const uint8_t *mask, double scale, T *dx) {
  using C = Acc<T>;
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    dx[i] = store<T>(mask[i] ? load(dy, i) * C(scale) : C(0));
}

// ---- batch assembly ------------------------------------------------------------
// Gather reads up to four dtypes at once (features, feature output, labels or
// targets, their output). Compiling every combination would be 1000+ kernels
// for a memory-bound copy, so the dtypes are switched on at run time: the
// branch is the same for the whole grid and costs nothing next to the loads.

// A stored value of any dtype as a double: exact for all but i64 beyond 2^53.
__device__ double load_real(const void *p, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float *>(p)[i];
    case DType::F64: return static_cast<const double *>(p)[i];
    case DType::F16: return __half2float(static_cast<const __half *>(p)[i]);
    case DType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    case DType::I32: return static_cast<const int32_t *>(p)[i];
    case DType::I64: return double(static_cast<const int64_t *>(p)[i]);
    default: return static_cast<const uint8_t *>(p)[i];
  }
}

// An integer label (the host checked that t is I32, I64 or U8).
__device__ int64_t load_integer(const void *p, DType t, int64_t i) {
  switch (t) {
    case DType::I32: return static_cast<const int32_t *>(p)[i];
    case DType::I64: return static_cast<const int64_t *>(p)[i];
    default: return static_cast<const uint8_t *>(p)[i];
  }
}

// out[i] = v * scale + shift in the output's compute type (double for f64,
// float otherwise), product and sum rounded separately as the CPU backend's
// baseline build does (no FMA contraction), then stored. With shift 0 (no
// normalisation) the batch is bit-identical to the CPU's on every machine;
// with a shift, the CPU's AVX-512 path may contract to an FMA and differ in
// the last bit.
__device__ void store_scaled(void *out, DType t, int64_t i, double v, double scale, double shift) {
  if (t == DType::F64) {
    static_cast<double *>(out)[i] = __dadd_rn(__dmul_rn(v, scale), shift);
    return;
  }
  const float f = __fadd_rn(__fmul_rn(float(v), float(scale)), float(shift));
  switch (t) {
    case DType::F16: static_cast<__half *>(out)[i] = __float2half_rn(f); break;
    case DType::BF16: static_cast<__nv_bfloat16 *>(out)[i] = __float2bfloat16_rn(f); break;
    default: static_cast<float *>(out)[i] = f;
  }
}

// Features and labels (or targets) of one batch in one launch: items
// [0, x_items) are feature elements, the rest label or target elements. The
// batch's rows are order[offset + r], with the offset read from the step.
__global__ void gather_kernel(GatherArgs a, int64_t x_items, int64_t y_items, const StepParams *step) {
  const int64_t *rows = a.order + (step ? step->offset : 0);
  for (int64_t i = global_thread(); i < x_items + y_items; i += grid_threads()) {
    if (i < x_items) {
      const int64_t r = i / a.cols, c = i - r * a.cols;
      store_scaled(a.out_x, a.out_x_type, i, load_real(a.x, a.x_type, rows[r] * a.cols + c), a.scale, a.shift);
    } else if (a.y_cols == 0) {
      const int64_t r = i - x_items;
      static_cast<int64_t *>(a.out_y)[r] = load_integer(a.y, a.y_type, rows[r]);
    } else {
      const int64_t j = i - x_items, r = j / a.y_cols, c = j - r * a.y_cols;
      store_scaled(a.out_y, a.out_y_type, j, load_real(a.y, a.y_type, rows[r] * a.y_cols + c), 1.0, 0.0);
    }
  }
}

}  // namespace

void bias_act(const Launch &L, const BiasActArgs &args) {
  const DType t = args.t;
  const int64_t rows = args.rows, cols = args.cols;
  void *y = args.y;
  const void *bias = args.bias;
  const UnaryOp act = args.act;
  const double alpha = args.alpha, threshold = args.threshold;
  void *pre = args.pre;
  if (rows <= 0 || cols <= 0) return;
  dispatch_float(t, "bias_act", [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_act_kernel<T><<<blocks_for(L, rows * cols), kThreads, 0, L.stream>>>(
        rows, cols, static_cast<T *>(y), static_cast<const T *>(bias), act, alpha, threshold, static_cast<T *>(pre));
  });
  KILN_CUDA_LAUNCHED("bias_act");
}

void act_backward(const Launch &L, const ActBackwardArgs &args) {
  const DType t = args.t;
  const int64_t n = args.n;
  const UnaryOp act = args.act;
  const double alpha = args.alpha, threshold = args.threshold;
  const void *dy = args.dy, *pre = args.pre, *y = args.y;
  void *dx = args.dx;
  if (n <= 0) return;
  dispatch_float(t, "act_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    act_backward_kernel<T><<<blocks_for(L, n), kThreads, 0, L.stream>>>(
        n, act, alpha, threshold, static_cast<const T *>(dy), static_cast<const T *>(pre), static_cast<const T *>(y),
        static_cast<T *>(dx));
  });
  KILN_CUDA_LAUNCHED("act_backward");
}

void bias_grad(const Launch &L, const BiasGradArgs &args) {
  const DType t = args.t;
  const int64_t rows = args.rows, cols = args.cols;
  const void *dy = args.dy;
  void *db = args.db;
  const double beta = args.beta;
  if (cols <= 0) return;
  dispatch_float(t, "bias_grad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_grad_kernel<T><<<blocks_for(L, cols, kWarp), dim3(kWarp, kBiasRows), 0, L.stream>>>(
        rows, cols, static_cast<const T *>(dy), static_cast<T *>(db), beta);
  });
  KILN_CUDA_LAUNCHED("bias_grad");
}

void cross_entropy(const Launch &L, const LossArgs &args) {
  const DType t = args.t;
  const int64_t rows = args.rows, cols = args.cols;
  const void *logits = args.pred;
  const int64_t *labels = static_cast<const int64_t *>(args.target);
  const double grad_scale = args.grad_scale;
  void *dlogits = args.dpred;
  double *stats = args.stats;
  if (rows <= 0) return;
  check(cols > 0, KILN_ERROR_INVALID_ARGUMENT, "cross_entropy needs at least one class");
  dispatch_float(t, "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cross_entropy_kernel<T><<<blocks_for(L, rows, kThreads / kWarp), kThreads, 0, L.stream>>>(
        rows, cols, static_cast<const T *>(logits), labels, grad_scale, args.label_smoothing,
        static_cast<T *>(dlogits), stats);
  });
  KILN_CUDA_LAUNCHED("cross_entropy");
}

void mse(const Launch &L, const LossArgs &args) {
  const DType t = args.t;
  const int64_t n = args.rows * args.cols;
  const void *pred = args.pred, *target = args.target;
  const double grad_scale = args.grad_scale;
  void *dpred = args.dpred;
  double *stats = args.stats;
  if (n <= 0) return;
  dispatch_float(t, "mse", [&](auto tag) {
    using T = typename decltype(tag)::type;
    mse_kernel<T><<<blocks_for(L, n), kThreads, 0, L.stream>>>(n, static_cast<const T *>(pred),
                                                               static_cast<const T *>(target), grad_scale,
                                                               static_cast<T *>(dpred), stats);
  });
  KILN_CUDA_LAUNCHED("mse");
}

void bce_with_logits(const Launch &L, const LossArgs &args) {
  const DType t = args.t;
  const int64_t n = args.rows * args.cols;
  const void *logits = args.pred, *target = args.target;
  const double grad_scale = args.grad_scale;
  void *dlogits = args.dpred;
  double *stats = args.stats;
  if (n <= 0) return;
  dispatch_float(t, "bce_with_logits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    bce_kernel<T><<<blocks_for(L, n), kThreads, 0, L.stream>>>(n, static_cast<const T *>(logits),
                                                               static_cast<const T *>(target), grad_scale,
                                                               static_cast<T *>(dlogits), stats);
  });
  KILN_CUDA_LAUNCHED("bce_with_logits");
}

void dropout(const Launch &L, const DropoutArgs &a, const StepParams *step) {
  if (a.n <= 0) return;
  dispatch_float(a.t, "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_kernel<T><<<blocks_for(L, a.n), kThreads, 0, L.stream>>>(a.n, static_cast<const T *>(a.x),
                                                                     static_cast<T *>(a.y), a.mask, 1.0 - a.p,
                                                                     formulas::dropout_keep_scale(a.p), step, a.stream);
  });
  KILN_CUDA_LAUNCHED("dropout");
}

void dropout_backward(const Launch &L, const DropoutBackwardArgs &args) {
  const DType t = args.t;
  const int64_t n = args.n;
  const void *dy = args.dy;
  const uint8_t *mask = args.mask;
  const double p = args.p;
  void *dx = args.dx;
  if (n <= 0) return;
  dispatch_float(t, "dropout_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_backward_kernel<T><<<blocks_for(L, n), kThreads, 0, L.stream>>>(n, static_cast<const T *>(dy), mask,
                                                                            formulas::dropout_keep_scale(p), static_cast<T *>(dx));
  });
  KILN_CUDA_LAUNCHED("dropout_backward");
}

void gather(const Launch &L, const GatherArgs &a, const StepParams *step) {
  if (a.count <= 0) return;
  const bool is_float_out_x = dtype_is_float(a.out_x_type);
  const bool labels = a.y_cols == 0;
  const bool integer_y = a.y_type == DType::I32 || a.y_type == DType::I64 || a.y_type == DType::U8;
  check(!a.x || is_float_out_x, KILN_ERROR_NOT_SUPPORTED,
        std::string("gather on CUDA writes float features, not ") + dtype_name(a.out_x_type));
  check(!a.y || (labels ? integer_y && a.out_y_type == DType::I64 : dtype_is_float(a.out_y_type)),
        KILN_ERROR_NOT_SUPPORTED,
        std::string("gather on CUDA takes integer labels into i64 or targets into a float dtype, not ") +
            dtype_name(a.y_type) + " into " + dtype_name(a.out_y_type));
  const int64_t x_items = a.x && a.cols > 0 ? a.count * a.cols : 0;
  const int64_t y_items = a.y ? a.count * (labels ? 1 : a.y_cols) : 0;
  if (x_items + y_items == 0) return;
  gather_kernel<<<blocks_for(L, x_items + y_items), kThreads, 0, L.stream>>>(a, x_items, y_items, step);
  KILN_CUDA_LAUNCHED("gather");
}

}  // namespace kiln::cuda
