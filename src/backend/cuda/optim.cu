// Optimizer kernels over one flat parameter buffer: global-norm gradient
// clipping that never leaves the device, and single-kernel SGD and Adam
// updates with torch.optim's arithmetic. The learning rate and step number
// are read from the step's StepParams block in device memory, so a captured
// CUDA graph applies each step's own values when it is replayed.
#include "backend/cuda/device_math.cuh"
#include "core/formulas/optimizers.hpp"

namespace kiln::cuda {
namespace {

// *sumsq += sum g^2 in double (the caller zeroes it first).
template <class T> __global__ void sum_squares_kernel(int64_t n, const T *g, double *sumsq) {
  double s = 0;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    double v = double(load(g, i));
    s += v * v;
  }
  block_atomic_add(s, sumsq);
}

// The norm, in place of the sum of squares (callers may read it later).
__global__ void sqrt_kernel(double *x) { *x = sqrt(*x); }

// g *= max_norm / (norm + 1e-6) when norm > max_norm, reading the norm the
// previous kernels left on the device: no host round trip.
template <class T> __global__ void clip_scale_kernel(int64_t n, T *g, double max_norm, const double *norm_p) {
  const double norm = *norm_p;
  if (!(norm > max_norm)) return;
  const Acc<T> f = Acc<T>(formulas::clip_factor(max_norm, norm));
  for (int64_t i = global_thread(); i < n; i += grid_threads()) g[i] = store<T>(load(g, i) * f);
}

// torch.optim.SGD with dampening 0 (formulas::sgd_step); step->step == 0 is
// the first update, which initialises the velocity with the gradient (and
// so never reads it).
template <class T, class C = Acc<T>>
__global__ void sgd_kernel(int64_t n, T *params, const T *grads, T *velocity, C momentum, C weight_decay,
                           bool nesterov, const StepParams *step) {
  const C lr = C(step->lr);
  const bool first_step = step->step == 0;
  const bool use_momentum = momentum != C(0), use_weight_decay = weight_decay != C(0);
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    C v = use_momentum && !first_step ? C(load(velocity, i)) : C(0);
    params[i] = store<T>(formulas::sgd_step(C(load(params, i)), C(load(grads, i)), &v, lr, momentum, weight_decay,
                                            use_weight_decay, use_momentum, nesterov, first_step));
    if (use_momentum) velocity[i] = store<T>(v);
  }
}

// Adam's hyper-parameters, fixed for the program's life.
struct AdamConfig {
  double beta1, beta2, eps, weight_decay;
  bool l2, shrink;  // which of the two weight decays applies (Adam's L2, AdamW's decay)
};

// torch.optim.Adam (L2 weight decay into the gradient) or AdamW (decoupled
// decay of the weight), formulas::adam_update_step. The constants of update
// number step->step + 1 (formulas::adam_step_constants, in double as the CPU
// computes them) are derived by every thread before its loop: a few double
// operations instead of a host round trip. Device pow may differ from the
// host's by an ulp of the double, which the rounding to f32 hides (f64 models
// may see that ulp).
template <class T, class C = Acc<T>>
__global__ void adam_kernel(int64_t n, T *params, const T *grads, T *m, T *v, AdamConfig config,
                            const StepParams *step) {
  const formulas::AdamStep<C> k = formulas::adam_step_constants<C>(step->lr, step->step + 1, config.beta1,
                                                                   config.beta2, config.eps, config.weight_decay);
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    C m_i = load(m, i), v_i = load(v, i);
    params[i] = store<T>(formulas::adam_update_step(C(load(params, i)), C(load(grads, i)), &m_i, &v_i, k, config.l2,
                                                    config.shrink));
    m[i] = store<T>(m_i);
    v[i] = store<T>(v_i);
  }
}

}  // namespace

void clip_grad_norm(const Launch &L, const ClipArgs &args) {
  const DType t = args.t;
  const int64_t n = args.n;
  void *grads = args.grads;
  const double max_norm = args.max_norm;
  double *scratch = args.scratch;
  KILN_CUDA_TRY(cudaMemsetAsync(scratch, 0, sizeof(double), L.stream), "clip_grad_norm");
  if (n <= 0) return;
  dispatch_float(t, "clip_grad_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    sum_squares_kernel<T><<<blocks_for(L, n), kThreads, 0, L.stream>>>(n, static_cast<const T *>(grads), scratch);
    KILN_CUDA_LAUNCHED("clip_grad_norm (sum of squares)");
    sqrt_kernel<<<1, 1, 0, L.stream>>>(scratch);
    KILN_CUDA_LAUNCHED("clip_grad_norm (norm)");
    clip_scale_kernel<T><<<blocks_for(L, n), kThreads, 0, L.stream>>>(n, static_cast<T *>(grads), max_norm, scratch);
  });
  KILN_CUDA_LAUNCHED("clip_grad_norm (scale)");
}

void sgd_update(const Launch &L, const SgdArgs &a, const StepParams *step) {
  if (a.n <= 0) return;
  check(step != nullptr, KILN_ERROR_INVALID_ARGUMENT, "sgd_update needs the step's StepParams");
  dispatch_float(a.t, "sgd_update", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Acc<T>;
    sgd_kernel<T><<<blocks_for(L, a.n), kThreads, 0, L.stream>>>(
        a.n, static_cast<T *>(a.params), static_cast<const T *>(a.grads), static_cast<T *>(a.velocity),
        C(a.momentum), C(a.weight_decay), a.nesterov, step);
  });
  KILN_CUDA_LAUNCHED("sgd_update");
}

void adam_update(const Launch &L, const AdamArgs &a, const StepParams *step) {
  if (a.n <= 0) return;
  check(step != nullptr, KILN_ERROR_INVALID_ARGUMENT, "adam_update needs the step's StepParams");
  const AdamConfig config{a.beta1, a.beta2, a.eps, a.weight_decay, a.weight_decay != 0 && !a.decoupled,
                          a.weight_decay != 0 && a.decoupled};
  dispatch_float(a.t, "adam_update", [&](auto tag) {
    using T = typename decltype(tag)::type;
    adam_kernel<T><<<blocks_for(L, a.n), kThreads, 0, L.stream>>>(a.n, static_cast<T *>(a.params),
                                                                   static_cast<const T *>(a.grads),
                                                                   static_cast<T *>(a.m), static_cast<T *>(a.v),
                                                                   config, step);
  });
  KILN_CUDA_LAUNCHED("adam_update");
}

}  // namespace kiln::cuda
