// Optimizer kernels over one flat parameter buffer: global-norm gradient
// clipping, SGD and Adam/AdamW, each written to follow torch.optim's update
// order step by step so results match PyTorch within rounding.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cpu/dtype_traits.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/vectorize.hpp"
#include "core/formulas/optimizers.hpp"

namespace kiln::cpu {

namespace {

constexpr int64_t kMaxPartials = 64;  // chunks of the norm's sum of squares

// Calls f(std::bool_constant<b>{}): turns a per-call flag into a template
// parameter, so the update loops carry no branches and vectorise.
template <class F>
void with_flag(bool b, F &&f) {
  if (b) f(std::true_type{}); else f(std::false_type{});
}

}  // namespace

// Also stores the gradient norm (before clipping) in scratch[0].
void clip_grad_norm(ThreadPool &pool, const ClipArgs &args) {
  const DType t = args.t;
  const int64_t n = args.n;
  void *grads = args.grads;
  const double max_norm = args.max_norm;
  double *scratch = args.scratch;
  if (n <= 0) {
    if (scratch) scratch[0] = 0;
    return;
  }
  dispatch_float(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    using C = typename T::Compute;
    S *g = static_cast<S *>(grads);
    double parts[kMaxPartials] = {};
    const int64_t grain = std::max(kElementwiseGrain, (n + kMaxPartials - 1) / kMaxPartials);
    const int64_t chunks = pool.chunk_count(n, grain);
    pool.parallel_chunks(n, grain, [&](int64_t chunk, int64_t begin, int64_t end) {
      double s0 = 0, s1 = 0;  // two chains: half the add latency
      int64_t i = begin;
      for (; i + 2 <= end; i += 2) {
        const double a = T::load(g[i]), b = T::load(g[i + 1]);
        s0 += a * a;
        s1 += b * b;
      }
      for (; i < end; ++i) { const double a = T::load(g[i]); s0 += a * a; }
      parts[chunk] = s0 + s1;
    });
    double sum = 0;
    for (int64_t c = 0; c < chunks; ++c) sum += parts[c];
    const double norm = std::sqrt(sum);
    if (scratch) scratch[0] = norm;
    if (!(norm > max_norm)) return;
    const C factor = C(formulas::clip_factor(max_norm, norm));
    pool.parallel_for(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) g[i] = T::store(T::load(g[i]) * factor);
    });
  });
}

// torch.optim.SGD, dampening 0 (formulas::sgd_step).
void sgd_update(ThreadPool &pool, const SgdArgs &args, const StepParams &step) {
  const DType t = args.t;
  const int64_t n = args.n;
  void *params = args.params, *velocity = args.velocity;
  const void *grads = args.grads;
  const double momentum = args.momentum, weight_decay = args.weight_decay;
  const bool nesterov = args.nesterov;
  const double lr = step.lr;
  const bool first_step = step.step == 0;
  if (n <= 0) return;
  dispatch_float(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    using C = typename T::Compute;
    S *p = static_cast<S *>(params);
    const S *gr = static_cast<const S *>(grads);
    S *vel = static_cast<S *>(velocity);
    const C lr_c = C(lr), mom = C(momentum), wd = C(weight_decay);
    with_flag(weight_decay != 0, [&](auto use_wd) {
      with_flag(momentum != 0, [&](auto use_momentum) {
        with_flag(nesterov, [&](auto use_nesterov) {
          with_flag(first_step, [&](auto is_first) {
            pool.parallel_for(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
              vectorized([&] {
                for (int64_t i = begin; i < end; ++i) {
                  C v = C(0);  // the velocity is read only where the update uses it
                  if constexpr (use_momentum && !is_first) v = T::load(vel[i]);
                  p[i] = T::store(formulas::sgd_step(T::load(p[i]), T::load(gr[i]), &v, lr_c, mom, wd, use_wd,
                                                     use_momentum, use_nesterov, is_first));
                  if constexpr (use_momentum) vel[i] = T::store(v);
                }
              });
            });
          });
        });
      });
    });
  });
}

// torch.optim.Adam (weight decay added to the gradient) or AdamW (decoupled:
// p *= 1 - lr * weight_decay first), then
//   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g^2
//   p -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// (formulas::adam_update_step).
void adam_update(ThreadPool &pool, const AdamArgs &args, const StepParams &params_of_step) {
  const DType t = args.t;
  const int64_t n = args.n;
  void *params = args.params, *m = args.m, *v = args.v;
  const void *grads = args.grads;
  const double beta1 = args.beta1, beta2 = args.beta2, eps = args.eps, weight_decay = args.weight_decay;
  const bool decoupled = args.decoupled;
  const double lr = params_of_step.lr;
  const int64_t step = params_of_step.step + 1;
  if (n <= 0) return;
  dispatch_float(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    using C = typename T::Compute;
    S *p = static_cast<S *>(params);
    const S *gr = static_cast<const S *>(grads);
    S *pm = static_cast<S *>(m);
    S *pv = static_cast<S *>(v);
    const formulas::AdamStep<C> k = formulas::adam_step_constants<C>(lr, step, beta1, beta2, eps, weight_decay);
    with_flag(weight_decay != 0 && !decoupled, [&](auto l2) {
      with_flag(weight_decay != 0 && decoupled, [&](auto shrink) {
        pool.parallel_for(n, kElementwiseGrain / 4, [&](int64_t begin, int64_t end) {
          vectorized([&] {
            for (int64_t i = begin; i < end; ++i) {
              C m_i = T::load(pm[i]), v_i = T::load(pv[i]);
              p[i] = T::store(formulas::adam_update_step(T::load(p[i]), T::load(gr[i]), &m_i, &v_i, k, l2, shrink));
              pm[i] = T::store(m_i);
              pv[i] = T::store(v_i);
            }
          });
        });
      });
    });
  });
}

}  // namespace kiln::cpu
