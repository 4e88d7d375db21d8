// The losses' per-element (or per-row) formulas, one each for the CPU
// backend (backend/cpu/nn_kernels.cpp) and the CUDA kernels
// (backend/cuda/nn_kernels.cu); how elements are summed (chunks, warps,
// atomics) is each backend's own. C is the compute type; losses are summed
// in double.
#pragma once

#include "core/formulas/host_device.hpp"

namespace kiln::formulas {

template <class C> struct LossTerm {
  double loss;  // this element's (or row's) share of the summed loss
  C grad;       // d loss / d pred, times the caller's scale
};

// Cross-entropy of one row of logits against the target (1 - e) one-hot +
// e / cols uniform (label smoothing e, PyTorch's
// CrossEntropyLoss(label_smoothing=e)), from the row's maximum mx, the sum s
// of exp(x_j - mx), the label's logit and mean_shift = mean_j(x_j - mx) (only
// read when e != 0): log(s) - (1 - e)(x_label - mx) - e mean_shift. With
// e = 0 it is log(s) - (x_label - mx) to the bit.
template <class C> KILN_HD double cross_entropy_row_loss(C s, C x_label, C mx, double smoothing, double mean_shift) {
  return double(fm::log(s)) - (1 - smoothing) * double(x_label - mx) - smoothing * mean_shift;
}
// The smoothed target times the gradient's scale: `uniform` on every column,
// `label_part` more at the label.
template <class C> struct SmoothedTarget {
  C uniform, label_part;
};
template <class C> KILN_HD SmoothedTarget<C> smoothed_target(double scale, double smoothing, int64_t cols) {
  return {C(scale * smoothing / double(cols)), C(scale * (1 - smoothing))};
}
// The gradient at column j of the row from e = exp(x_j - mx) and factor =
// scale / s: softmax_j * scale less the smoothed target (to the bit
// softmax_j * scale, less scale at the label, when e = 0).
template <class C> KILN_HD C cross_entropy_grad(C e, C factor, bool is_label, SmoothedTarget<C> target) {
  return e * factor - target.uniform - (is_label ? target.label_part : C(0));
}

// (pred - target)^2, and its gradient 2 (pred - target) times scale
// (scale2 = 2 * the caller's scale).
template <class C> KILN_HD LossTerm<C> mse_term(C pred, C target, C scale2) {
  const C d = pred - target;
  return {double(d) * double(d), d * scale2};
}

// max(x, 0) - x y + log1p(exp(-|x|)), and sigmoid(x) - y from the same
// e = exp(-|x|) in (0, 1]: stable for any x; times scale.
template <class C> KILN_HD LossTerm<C> bce_with_logits_term(C x, C y, C scale) {
  const C e = fm::exp(-fm::fabs(x));
  const C sig = (x >= C(0) ? C(1) : e) / (C(1) + e);
  return {double((x < C(0) ? C(0) : x) - x * y + fm::log1p(e)), (sig - y) * scale};
}

// Inverted dropout's factor for kept elements: 1 / (1 - p), or 0 when
// nothing is kept (p = 1 drops everything).
KILN_HD double dropout_keep_scale(double p) { return p < 1.0 ? 1.0 / (1.0 - p) : 0.0; }

}  // namespace kiln::formulas
