// The optimizers' per-element updates and gradient clipping's factor, one
// formula each for the CPU backend (backend/cpu/optim.cpp) and the CUDA
// kernels (backend/cuda/optim.cu), following torch.optim's update order so
// results match PyTorch within rounding. C is the compute type; the flags
// are constant over a call, so after inlining the loops carry no branches.
#pragma once

#include <cstdint>

#include "core/formulas/host_device.hpp"

namespace kiln::formulas {

// Gradient-norm clipping: the factor gradients are multiplied by when the
// norm exceeds max_norm (torch.nn.utils.clip_grad_norm_'s 1e-6).
KILN_HD double clip_factor(double max_norm, double norm) { return max_norm / (norm + 1e-6); }

// torch.optim.SGD, dampening 0, on one element; returns the new parameter
// and updates *velocity when momentum is on (the first step initialises it
// with the gradient):
//   g = grad + weight_decay * p
//   v = g on the first step, else momentum * v + g
//   g = g + momentum * v (nesterov) or v
//   p = p - lr * g
template <class C>
KILN_HD C sgd_step(C param, C grad, C *velocity, C lr, C momentum, C weight_decay, bool use_weight_decay,
                   bool use_momentum, bool nesterov, bool first_step) {
  C g = grad;
  if (use_weight_decay) g += weight_decay * param;
  if (use_momentum) {
    const C v = first_step ? g : momentum * *velocity + g;
    *velocity = v;
    g = nesterov ? g + momentum * v : v;
  }
  return param - lr * g;
}

// Adam's constants for update number `step` (1-based; 0 and below count as
// 1), computed in double and then rounded to C, as both backends do.
template <class C> struct AdamStep {
  C step_size;                     // lr / (1 - beta1^t)
  C bc2_sqrt;                      // sqrt(1 - beta2^t)
  C weight1, beta2, weight2, eps;  // 1 - beta1, beta2, 1 - beta2, eps
  C weight_decay, decay;           // Adam's L2 coefficient; AdamW's factor 1 - lr * wd
};

template <class C>
KILN_HD AdamStep<C> adam_step_constants(double lr, int64_t step, double beta1, double beta2, double eps,
                                        double weight_decay) {
  const double t = double(step > 1 ? step : 1);
  AdamStep<C> k;
  k.step_size = C(lr / (1 - fm::pow(beta1, t)));
  k.bc2_sqrt = C(fm::sqrt(1 - fm::pow(beta2, t)));
  k.weight1 = C(1 - beta1), k.beta2 = C(beta2), k.weight2 = C(1 - beta2), k.eps = C(eps);
  k.weight_decay = C(weight_decay), k.decay = C(1 - lr * weight_decay);
  return k;
}

// torch.optim.Adam (l2: weight decay into the gradient) or AdamW (shrink:
// p *= 1 - lr * weight_decay first) on one element, with torch's lerp for
// the first moment (exact at both ends, switching formula at weight 0.5);
// returns the new parameter and updates *m and *v.
template <class C>
KILN_HD C adam_update_step(C param, C grad, C *m, C *v, const AdamStep<C> &k, bool l2, bool shrink) {
  C w = param, g = grad;
  if (shrink) w *= k.decay;
  if (l2) g += k.weight_decay * w;
  const C m_old = *m;
  const C m_new = k.weight1 < C(0.5) ? m_old + k.weight1 * (g - m_old) : g - (g - m_old) * (C(1) - k.weight1);
  const C v_new = k.beta2 * *v + k.weight2 * g * g;
  *m = m_new;
  *v = v_new;
  return w - k.step_size * (m_new / (fm::sqrt(v_new) / k.bc2_sqrt + k.eps));
}

}  // namespace kiln::formulas
