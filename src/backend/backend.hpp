// The backend interface: everything kiln asks of a device. One
// implementation per folder (cpu/, cuda/). Core code sees only this header.
//
// Contract for every kernel below:
//  - pointers are device pointers of this backend (CPU backend: host memory),
//    contiguous, row-major, of the dtype given; the caller (src/core) has
//    already checked shapes, dtypes and devices, so kernels only validate what
//    they alone can know (a failing library call) and throw kiln::Error with
//    KILN_ERROR_BACKEND or KILN_ERROR_OUT_OF_MEMORY;
//  - kernels are queued in order on the device's stream (CUDA) or run before
//    returning (CPU); copies to the host and `synchronize` wait;
//  - "float" dtypes are F32, F64, F16 and BF16; half types compute in f32;
//  - `Stats` accumulators are small device buffers of doubles that kernels add
//    into, so that training never waits for the device in a step.
//
// The CUDA backend lives in libkiln_cuda.so and is created through the C
// symbol kiln_backend_cuda_create (see plugin.hpp). Backends are owned by a
// context; one backend object serves all devices of its kind and may be
// called from several threads at once.
#pragma once

#include <cstdint>
#include <string>

#include "core/device.hpp"
#include "core/dtype.hpp"

namespace kiln {

constexpr int kMaxDims = KILN_MAX_DIMS;

// Elementwise ops with two inputs. Comparison ops write U8 0/1.
enum class BinaryOp { Add, Sub, Mul, Div, Maximum, Minimum, Pow, Eq, Ne, Lt, Le, Gt, Ge };
// Elementwise ops with one input; alpha is LeakyReLU's slope.
enum class UnaryOp { Neg, Abs, Exp, Log, Sqrt, Relu, Gelu, Tanh, Sigmoid, LeakyRelu, Identity };
enum class ReduceOp { Sum, Mean, Max, Argmax };

// A broadcast binary op: out has `ndim` dims `shape`; a and b are read with
// element strides (0 along broadcast dimensions). ndim <= kMaxDims.
struct Broadcast {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t a_stride[kMaxDims] = {};
  int64_t b_stride[kMaxDims] = {};
};

// Device facts for kiln_device_get_info.
struct DeviceInfo {
  std::string name;
  int64_t total_memory = 0, free_memory = 0;
  int64_t compute_major = 0, compute_minor = 0, multiprocessor_count = 0;
  int64_t driver_version = 0, runtime_version = 0, threads = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual kiln_device_kind kind() const = 0;
  virtual int64_t device_count() const = 0;
  virtual DeviceInfo info(int64_t index) const = 0;
  virtual void synchronize(int64_t index) = 0;

  // ---- memory ----------------------------------------------------------
  // alloc throws OUT_OF_MEMORY (never returns null for bytes > 0).
  virtual void *alloc(int64_t index, int64_t bytes) = 0;
  virtual void free(int64_t index, void *ptr) = 0;
  // Page-locked host memory (the CPU backend returns ordinary memory).
  virtual void *alloc_pinned(int64_t bytes) = 0;
  virtual void free_pinned(void *ptr) = 0;
  // Copies within this backend's device or between it and the host. `pinned`
  // says the host side is page-locked, so the copy may be asynchronous;
  // copies to unpinned host memory wait for the device.
  virtual void copy_to_device(int64_t index, void *dst, const void *host_src, int64_t bytes, bool pinned) = 0;
  virtual void copy_to_host(int64_t index, void *host_dst, const void *src, int64_t bytes, bool pinned) = 0;
  virtual void copy_on_device(int64_t index, void *dst, const void *src, int64_t bytes) = 0;

  // ---- tensor kernels (n = element count) --------------------------------
  virtual void fill(int64_t index, DType t, int64_t n, void *out, double value) = 0;
  virtual void arange(int64_t index, DType t, int64_t n, void *out, double start, double step) = 0;
  virtual void cast(int64_t index, DType from, const void *in, DType to, void *out, int64_t n) = 0;
  virtual void unary(int64_t index, UnaryOp op, DType t, int64_t n, const void *in, void *out, double alpha) = 0;
  // out = a op scalar (comparisons are not used here).
  virtual void scalar(int64_t index, BinaryOp op, DType t, int64_t n, const void *a, double s, void *out) = 0;
  // t is the input dtype; comparisons write U8.
  virtual void binary(int64_t index, BinaryOp op, DType t, const Broadcast &bc, const void *a, const void *b,
                      void *out) = 0;
  // in viewed as [outer, n, inner], reduced over n -> out [outer, inner]
  // (Argmax writes I64; n > 0 for Max/Argmax).
  virtual void reduce(int64_t index, ReduceOp op, DType t, int64_t outer, int64_t n, int64_t inner, const void *in,
                      void *out) = 0;
  // Softmax (or log-softmax) over n of [outer, n, inner].
  virtual void softmax(int64_t index, DType t, int64_t outer, int64_t n, int64_t inner, const void *in, void *out,
                       bool log) = 0;
  // C[m,n] = alpha * op(A) op(B) + beta * C, row-major; op(A) is [m,k]
  // (A stored [k,m] when trans_a), op(B) is [k,n] (B stored [n,k] when
  // trans_b). Float dtypes; f32 in full fp32 precision.
  virtual void gemm(int64_t index, DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                    const void *a, const void *b, double beta, void *c) = 0;

  // ---- neural-network kernels (float dtypes, [rows, cols] row-major) -----
  // y = act(y + bias) in place over [rows, cols]; bias may be null. When
  // pre is non-null it receives y + bias (needed by GELU's backward).
  virtual void bias_act(int64_t index, DType t, int64_t rows, int64_t cols, void *y, const void *bias, UnaryOp act,
                        double alpha, void *pre) = 0;
  // dx = dy * act'(.), from the pre-activation `pre` or the output `y`
  // (ReLU, LeakyReLU, Tanh, Sigmoid use y; GELU uses pre). dx may be dy.
  virtual void act_backward(int64_t index, DType t, int64_t n, UnaryOp act, double alpha, const void *dy,
                            const void *pre, const void *y, void *dx) = 0;
  // db[cols] = beta * db + sum over rows of dy[rows, cols].
  virtual void bias_grad(int64_t index, DType t, int64_t rows, int64_t cols, const void *dy, void *db,
                         double beta) = 0;
  // Cross-entropy from logits with I64 labels: stats[0] += sum of row losses,
  // stats[1] += rows whose argmax equals the label. When dlogits is
  // non-null it receives (softmax - onehot) * grad_scale. Labels outside
  // [0, cols) throw INVALID_ARGUMENT on the CPU; CUDA counts them as loss 0
  // and sets stats[2] += 1 so the caller can report them.
  virtual void cross_entropy(int64_t index, DType t, int64_t rows, int64_t cols, const void *logits,
                             const int64_t *labels, double grad_scale, void *dlogits, double *stats) = 0;
  // MSE over n elements: stats[0] += sum (p - y)^2; dpred = 2 (p - y) * scale.
  virtual void mse(int64_t index, DType t, int64_t n, const void *pred, const void *target, double grad_scale,
                   void *dpred, double *stats) = 0;
  // BCE with logits over n elements, numerically stable: stats[0] += sum of
  // losses; dlogits = (sigmoid(x) - y) * scale.
  virtual void bce_with_logits(int64_t index, DType t, int64_t n, const void *logits, const void *target,
                               double grad_scale, void *dlogits, double *stats) = 0;
  // Inverted dropout: mask[i] = keep (U8), y = x * mask / (1 - p). The mask
  // is a function of (seed, i) only (core/rng.hpp), identical on all backends.
  virtual void dropout(int64_t index, DType t, int64_t n, const void *x, void *y, uint8_t *mask, double p,
                       uint64_t seed) = 0;
  // dx = dy * mask / (1 - p).
  virtual void dropout_backward(int64_t index, DType t, int64_t n, const void *dy, const uint8_t *mask, double p,
                                void *dx) = 0;
  // Global-norm clipping over one flat gradient buffer: if ||g|| > max_norm,
  // g *= max_norm / (||g|| + 1e-6). `scratch` is one device double.
  virtual void clip_grad_norm(int64_t index, DType t, int64_t n, void *grads, double max_norm, double *scratch) = 0;
  // SGD as torch.optim.SGD (dampening 0) over one flat buffer; `velocity` is
  // used when momentum != 0 (first_step initialises it with the gradient).
  virtual void sgd_update(int64_t index, DType t, int64_t n, void *params, const void *grads, void *velocity,
                          double lr, double momentum, double weight_decay, bool nesterov, bool first_step) = 0;
  // Adam / AdamW (decoupled = true) as torch.optim; step is 1-based.
  virtual void adam_update(int64_t index, DType t, int64_t n, void *params, const void *grads, void *m, void *v,
                           double lr, double beta1, double beta2, double eps, double weight_decay, bool decoupled,
                           int64_t step) = 0;
  // Batch assembly: out[r, :] = src[rows[r], :] * scale + shift for r < count,
  // src of dtype src_t (U8 or float) with `cols` columns, out of float dtype
  // out_t. rows are I64 indices on this device.
  virtual void gather_rows(int64_t index, DType src_t, const void *src, int64_t cols, const int64_t *rows,
                           int64_t count, DType out_t, void *out, double scale, double shift) = 0;
  // Labels: out[r] = (int64) src[rows[r]] for integer src_t (U8, I32, I64).
  virtual void gather_labels(int64_t index, DType src_t, const void *src, const int64_t *rows, int64_t count,
                             int64_t *out) = 0;
};

}  // namespace kiln
