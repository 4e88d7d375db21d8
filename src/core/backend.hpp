// The backend interface: everything kiln asks of a device. One
// implementation per folder under src/backend (cpu/, cuda/), created by the
// registry there (src/backend/registry.hpp). It sits with core's types so
// core includes nothing above itself. The training step is not driven
// kernel by kernel from here: core/program.hpp describes a whole step as a
// program that each backend compiles (Backend::compile).
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
//    into, so that training never waits for the device in a step;
//  - values that change from one training step to the next (learning rate,
//    optimizer step, dropout seed, position in the shuffled order) are never
//    passed by value: kernels read them from a StepParams block in the
//    device's memory, so a captured step replays with new values.
//
// The CUDA backend lives in libkiln_cuda.so and is created through the C
// symbol kiln_backend_cuda_create (see backend/plugin.hpp). One backend
// object serves all devices of its kind, is shared by every context of the
// process and may be called from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/device.hpp"
#include "core/dtype.hpp"

namespace kiln {

constexpr int kMaxDims = KILN_MAX_DIMS;

// Elementwise ops with two inputs. Comparison ops write U8 0/1.
enum class BinaryOp { Add, Sub, Mul, Div, Maximum, Minimum, Pow, Eq, Ne, Lt, Le, Gt, Ge };
// Elementwise ops with one input. Their parameters, where they take any:
// alpha is LeakyReLU's slope, ELU's alpha or Softplus's beta; threshold is
// Softplus's. Neg..LeakyRelu are kiln_unary_op's order (api/tensor.cpp).
enum class UnaryOp { Neg, Abs, Exp, Log, Sqrt, Relu, Gelu, Tanh, Sigmoid, LeakyRelu, Identity, Elu, Selu, Softplus };

// Whether an activation's gradient is computed from its input (the
// pre-activation) rather than its output: see core/formulas/activations.hpp.
constexpr bool act_grad_reads_pre(UnaryOp act) {
  return act == UnaryOp::Gelu || act == UnaryOp::Elu || act == UnaryOp::Selu || act == UnaryOp::Softplus;
}
enum class ReduceOp { Sum, Mean, Max, Argmax };

// How f32 products are computed: exactly (fp32 multiply-adds), or on CUDA's
// TF32 tensor cores (10-bit mantissa inputs, fp32 accumulation).
enum class MathMode { Exact, Tf32 };

// The values of one training step that change from step to step, read by
// kernels from the step's device memory. The trainer writes a table of them
// ahead of the steps (core/program.hpp).
struct StepParams {
  double lr = 0;              // from the schedule
  int64_t step = 0;           // optimizer updates done before this one (0: the first)
  uint64_t dropout_seed = 0;  // the masks of stage s use rng_bits(dropout_seed, s)
  int64_t offset = 0;         // position of the batch's first sample in the shuffled order
};

// C[m,n] = alpha * op(A) op(B) + beta * C, row-major; op(A) is [m,k] (A stored
// [k,m] when trans_a), op(B) is [k,n] (B stored [n,k] when trans_b). Float
// dtypes, f16/bf16 accumulate in f32; f32 exactly unless math is Tf32.
struct GemmArgs {
  DType t = DType::F32;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  double alpha = 1, beta = 0;
  const void *a = nullptr, *b = nullptr;
  void *c = nullptr;
  MathMode math = MathMode::Exact;
};

// SGD as torch.optim.SGD (dampening 0) over one flat buffer of n elements;
// `velocity` is used when momentum != 0 (step->step == 0 initialises it
// with the gradient). lr comes from step->lr.
struct SgdArgs {
  DType t = DType::F32;
  int64_t n = 0;
  void *params = nullptr;
  const void *grads = nullptr;
  void *velocity = nullptr;
  double momentum = 0, weight_decay = 0;
  bool nesterov = false;
};

// Adam / AdamW (decoupled) as torch.optim over one flat buffer; the update
// is number step->step + 1, at lr step->lr.
struct AdamArgs {
  DType t = DType::F32;
  int64_t n = 0;
  void *params = nullptr;
  const void *grads = nullptr;
  void *m = nullptr, *v = nullptr;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;
};

// Inverted dropout over n elements: mask[i] = keep (U8; mask may be null),
// y = x * keep / (1 - p). Element i is kept when rng_uniform(seed, i) < 1 - p
// (core/rng.hpp), identical on every backend, where seed is
// rng_bits(step->dropout_seed, stream) inside a training step and `stream`
// itself when the kernel is given no StepParams.
struct DropoutArgs {
  DType t = DType::F32;
  int64_t n = 0;
  const void *x = nullptr;
  void *y = nullptr;
  uint8_t *mask = nullptr;
  double p = 0;
  uint64_t stream = 0;
};

// Batch assembly from resident data, rows r < count taken from sample
// order[offset + r] (offset = step->offset, or 0 without StepParams):
//   out_x[r, :] = x[sample, :] * scale + shift   (x U8 or float, out_x float)
//   out_y[r]    = (int64) y[sample]              (y_cols == 0: integer labels)
//   out_y[r, :] = y[sample, :]                   (y_cols > 0: float targets)
// Either half may be left out (null x or null y). The order is trusted: every
// value must lie in the data's rows (the caller's own shuffles).
struct GatherArgs {
  const int64_t *order = nullptr;
  int64_t count = 0;
  DType x_type = DType::U8;
  const void *x = nullptr;
  int64_t cols = 0;
  double scale = 1, shift = 0;
  DType out_x_type = DType::F32;
  void *out_x = nullptr;
  DType y_type = DType::I64;
  const void *y = nullptr;
  int64_t y_cols = 0;
  DType out_y_type = DType::I64;
  void *out_y = nullptr;
};

struct StepProgram;
class Executable;

// A broadcast binary op: out has `ndim` dims `shape`; a and b are read with
// element strides (0 along broadcast dimensions). ndim <= kMaxDims.
struct Broadcast {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t a_stride[kMaxDims] = {};
  int64_t b_stride[kMaxDims] = {};
};

// ---- arguments of the tensor kernels (n = element count) ----------------

// out[i] = value, converted to t.
struct FillArgs {
  DType t = DType::F32;
  int64_t n = 0;
  void *out = nullptr;
  double value = 0;
};

// out[i] = start + i * step, converted to t.
struct ArangeArgs {
  DType t = DType::F32;
  int64_t n = 0;
  void *out = nullptr;
  double start = 0, step = 1;
};

// out[i] = (to) in[i], n elements from dtype `from` to dtype `to`.
struct CastArgs {
  DType from = DType::F32, to = DType::F32;
  int64_t n = 0;
  const void *in = nullptr;
  void *out = nullptr;
};

// out[i] = op(in[i]); alpha and threshold are the op's parameters (UnaryOp).
struct UnaryArgs {
  UnaryOp op = UnaryOp::Identity;
  DType t = DType::F32;
  int64_t n = 0;
  const void *in = nullptr;
  void *out = nullptr;
  double alpha = 0, threshold = 0;
};

// out[i] = a[i] op s (comparisons are not used here).
struct ScalarArgs {
  BinaryOp op = BinaryOp::Add;
  DType t = DType::F32;
  int64_t n = 0;
  const void *a = nullptr;
  double s = 0;
  void *out = nullptr;
};

// out = a op b, broadcast as `bc` says; t is the input dtype (comparisons
// write U8).
struct BinaryArgs {
  BinaryOp op = BinaryOp::Add;
  DType t = DType::F32;
  Broadcast bc;
  const void *a = nullptr, *b = nullptr;
  void *out = nullptr;
};

// `in` viewed as [outer, n, inner], reduced over n into out [outer, inner]
// (Argmax writes I64; n > 0 for Max and Argmax).
struct ReduceArgs {
  ReduceOp op = ReduceOp::Sum;
  DType t = DType::F32;
  int64_t outer = 1, n = 0, inner = 1;
  const void *in = nullptr;
  void *out = nullptr;
};

// Softmax (log-softmax when `log`) over n of [outer, n, inner].
struct SoftmaxArgs {
  DType t = DType::F32;
  int64_t outer = 1, n = 0, inner = 1;
  const void *in = nullptr;
  void *out = nullptr;
  bool log = false;
};

// ---- arguments of the neural-network kernels (float dtypes, row-major) ----

// y = act(y + bias) in place over [rows, cols]; bias may be null. When pre
// is non-null it receives y + bias (needed by the backward of the
// activations whose gradient reads their input: act_grad_reads_pre).
struct BiasActArgs {
  DType t = DType::F32;
  int64_t rows = 0, cols = 0;
  void *y = nullptr;
  const void *bias = nullptr;
  UnaryOp act = UnaryOp::Identity;
  double alpha = 0, threshold = 0;
  void *pre = nullptr;
};

// dx = dy * act'(.) over n elements, from the pre-activation `pre` or the
// output `y` (act_grad_reads_pre says which; ReLU, LeakyReLU, Tanh, Sigmoid
// use y). dx may be dy.
struct ActBackwardArgs {
  DType t = DType::F32;
  int64_t n = 0;
  UnaryOp act = UnaryOp::Identity;
  double alpha = 0, threshold = 0;
  const void *dy = nullptr, *pre = nullptr, *y = nullptr;
  void *dx = nullptr;
};

// db[cols] = beta * db + sum over rows of dy[rows, cols].
struct BiasGradArgs {
  DType t = DType::F32;
  int64_t rows = 0, cols = 0;
  const void *dy = nullptr;
  void *db = nullptr;
  double beta = 0;
};

// A loss over pred [rows, cols] (logits for cross-entropy and BCE) against
// `target`: I64 labels [rows] for cross-entropy, else [rows, cols] of t.
// stats[0] += the sum of the losses; when dpred is non-null it receives
// the loss's gradient times grad_scale (see each kernel). Cross-entropy only:
// label_smoothing e in [0, 1] makes the target distribution of a row with
// label y q_c = (1 - e) [c = y] + e / cols (PyTorch's label_smoothing), so
// its loss is -sum_c q_c log softmax(x)_c and its gradient softmax(x) - q.
struct LossArgs {
  DType t = DType::F32;
  int64_t rows = 0, cols = 0;
  const void *pred = nullptr, *target = nullptr;
  double grad_scale = 1;
  void *dpred = nullptr;
  double *stats = nullptr;
  double label_smoothing = 0;
};

// dx = dy * mask / (1 - p) over n elements.
struct DropoutBackwardArgs {
  DType t = DType::F32;
  int64_t n = 0;
  const void *dy = nullptr;
  const uint8_t *mask = nullptr;
  double p = 0;
  void *dx = nullptr;
};

// Global-norm clipping over one flat gradient buffer of n elements: if
// ||g|| > max_norm, g *= max_norm / (||g|| + 1e-6). `scratch` is one device
// double.
struct ClipArgs {
  DType t = DType::F32;
  int64_t n = 0;
  void *grads = nullptr;
  double max_norm = 0;
  double *scratch = nullptr;
};

// ---- inference with weights prepared once (Model::predict) ---------------

// A Linear layer's weights W [out, in] prepared by Backend::pack_linear for
// repeated inference products: a copy in the layout the backend's kernels
// read fastest, or (the default) W itself. Owned by the caller; valid while
// W's contents stay as they were, so the caller keys it on W's storage
// version (core/tensor.hpp) and never keeps one while others may write W.
class PackedLinear {
 public:
  PackedLinear(DType t, int64_t out, int64_t in, const void *w) : t(t), out(out), in(in), w(w) {}
  virtual ~PackedLinear() = default;
  const DType t;
  const int64_t out, in;
  const void *const w;  // the weights it was made from
};

// y [rows, out] = act(x W^T + b), x [rows, in] and b [out] (may be null) of
// the packed weights' dtype; alpha and threshold are act's parameters.
struct PackedLinearArgs {
  int64_t rows = 0;
  const void *x = nullptr;
  const PackedLinear *w = nullptr;
  const void *bias = nullptr;
  void *y = nullptr;
  UnaryOp act = UnaryOp::Identity;
  double alpha = 0, threshold = 0;
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
  // Waits for all work on device `index`, queued by anyone (another
  // library's streams too: a DLPack consumer's kernels), not only kiln's:
  // before memory such a consumer may still read is freed (core/dlpack.cpp).
  virtual void synchronize_device(int64_t index) { synchronize(index); }
  // The native queue kernels of device `index` are queued on (a cudaStream_t
  // for CUDA), for an engine that must order its own work after them (a
  // collective's allreduce_start, core/collective.hpp); null where kernels run
  // before returning (the CPU).
  virtual void *queue(int64_t) { return nullptr; }

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

  // ---- tensor kernels: see each argument struct ---------------------------
  virtual void fill(int64_t index, const FillArgs &args) = 0;
  virtual void arange(int64_t index, const ArangeArgs &args) = 0;
  virtual void cast(int64_t index, const CastArgs &args) = 0;
  virtual void unary(int64_t index, const UnaryArgs &args) = 0;
  virtual void scalar(int64_t index, const ScalarArgs &args) = 0;
  virtual void binary(int64_t index, const BinaryArgs &args) = 0;
  virtual void reduce(int64_t index, const ReduceArgs &args) = 0;
  virtual void softmax(int64_t index, const SoftmaxArgs &args) = 0;
  virtual void gemm(int64_t index, const GemmArgs &args) = 0;

  // ---- neural-network kernels: see each argument struct -------------------
  virtual void bias_act(int64_t index, const BiasActArgs &args) = 0;
  virtual void act_backward(int64_t index, const ActBackwardArgs &args) = 0;
  virtual void bias_grad(int64_t index, const BiasGradArgs &args) = 0;
  // Cross-entropy from logits with I64 labels: stats[0] += sum of row
  // losses, stats[1] += rows whose argmax equals the label; dpred =
  // (softmax - onehot) * grad_scale. Labels outside [0, cols) throw
  // INVALID_ARGUMENT on the CPU; CUDA counts them as loss 0 and sets
  // stats[2] += 1 so the caller can report them.
  virtual void cross_entropy(int64_t index, const LossArgs &args) = 0;
  // MSE over rows * cols elements: stats[0] += sum (p - y)^2; dpred =
  // 2 (p - y) * grad_scale.
  virtual void mse(int64_t index, const LossArgs &args) = 0;
  // BCE with logits over rows * cols elements, numerically stable:
  // stats[0] += sum of losses; dpred = (sigmoid(x) - y) * grad_scale.
  virtual void bce_with_logits(int64_t index, const LossArgs &args) = 0;
  // See DropoutArgs; step may be null (then args.stream is the seed).
  virtual void dropout(int64_t index, const DropoutArgs &args, const StepParams *step) = 0;
  virtual void dropout_backward(int64_t index, const DropoutBackwardArgs &args) = 0;
  virtual void clip_grad_norm(int64_t index, const ClipArgs &args) = 0;
  // See SgdArgs and AdamArgs; step is the StepParams block on this device.
  virtual void sgd_update(int64_t index, const SgdArgs &args, const StepParams *step) = 0;
  virtual void adam_update(int64_t index, const AdamArgs &args, const StepParams *step) = 0;
  // See GatherArgs; step may be null (offset 0).
  virtual void gather(int64_t index, const GatherArgs &args, const StepParams *step) = 0;
  // A seeded permutation of [0, n) into out (I64, on this device): the
  // indices stably sorted by the 32-bit keys rng_bits(seed, i) >> 32. Every
  // backend gives the same permutation for the same seed. May allocate
  // scratch memory on the device.
  virtual void shuffle(int64_t index, int64_t n, uint64_t seed, int64_t *out) = 0;

  // ---- inference with prepared weights (see PackedLinear) ----------------
  // Prepares W [out, in] (float dtype t) for linear_packed. The default
  // keeps W's pointer, so its products read W itself; the CPU copies f32
  // weights into its kernels' column blocks. Throws OUT_OF_MEMORY.
  virtual std::unique_ptr<PackedLinear> pack_linear(int64_t index, DType t, const void *w, int64_t out, int64_t in);
  // See PackedLinearArgs. The default is gemm then bias_act on W itself;
  // the CPU fuses them, picks a matrix-vector kernel for a few rows and its
  // thread count per product, and allocates nothing.
  virtual void linear_packed(int64_t index, const PackedLinearArgs &args);

  // ---- training programs (core/program.hpp) -------------------------------
  // Compiles a step program for device `index`. The default, in
  // core/program.cpp, runs the program's ops as the plain sequence of the
  // kernels above; a backend overrides it to fuse ops or capture them.
  virtual std::unique_ptr<Executable> compile(int64_t index, const StepProgram &program);
};

}  // namespace kiln
