// The activations and their gradients, one formula each for the CPU backend
// (backend/cpu/activation_math.hpp wraps them for its loops) and the CUDA
// kernels (backend/cuda/device_math.cuh's unary_op and act_grad), so the CPU
// tests exercise the GPU's arithmetic. C is the compute type (f32 for
// f16/bf16 data). NaN in gives NaN out, as in PyTorch (hence x < 0 ? ... : x).
// Gradients are dy * act'(.) from what the activation's backward reads: the
// output y (ReLU, LeakyReLU, Tanh, Sigmoid, as PyTorch does) or the
// pre-activation x (GELU, ELU, SELU, Softplus: ELU with a negative alpha is
// not invertible, so x is the one input that always determines the slope).
#pragma once

#include "core/formulas/host_device.hpp"

namespace kiln::formulas {

template <class C> KILN_HD C relu(C x) { return x < C(0) ? C(0) : x; }
template <class C> KILN_HD C leaky_relu(C x, C alpha) { return x < C(0) ? alpha * x : x; }
template <class C> KILN_HD C tanh_act(C x) { return fm::tanh(x); }
// 1 / (1 + e^-x) overflows harmlessly to 0 for very negative x.
template <class C> KILN_HD C sigmoid(C x) { return C(1) / (C(1) + fm::exp(-x)); }
// The exact (erf) GELU, torch.nn.GELU()'s default: 0.5 x (1 + erf(x / sqrt 2)).
template <class C> KILN_HD C gelu(C x) { return C(0.5) * x * (C(1) + fm::erf(x * C(0.70710678118654752440))); }
// torch.nn.ELU(alpha): x, or alpha (e^x - 1) for x <= 0 (expm1: exact near 0).
template <class C> KILN_HD C elu(C x, C alpha) { return x > C(0) ? x : alpha * fm::expm1(x); }
// torch.nn.SELU: scale * ELU(x, alpha) with the self-normalising constants
// of Klambauer et al. (PyTorch's, to double precision).
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;
template <class C> KILN_HD C selu(C x) { return C(kSeluScale) * (x > C(0) ? x : C(kSeluAlpha) * fm::expm1(x)); }
// torch.nn.Softplus(beta, threshold): log(1 + e^(beta x)) / beta, and x
// itself where beta x > threshold. Written max(bx, 0) + log1p(e^-|bx|), which
// is the same value without overflowing for a large threshold.
template <class C> KILN_HD C softplus(C x, C beta, C threshold) {
  const C bx = beta * x;
  if (bx > threshold) return x;
  return ((bx > C(0) ? bx : C(0)) + fm::log1p(fm::exp(-fm::fabs(bx)))) / beta;
}

template <class C> KILN_HD C relu_grad(C dy, C y) { return y > C(0) ? dy : C(0); }
template <class C> KILN_HD C leaky_relu_grad(C dy, C y, C alpha) { return y > C(0) ? dy : dy * alpha; }
template <class C> KILN_HD C tanh_grad(C dy, C y) { return dy * (C(1) - y * y); }
template <class C> KILN_HD C sigmoid_grad(C dy, C y) { return dy * y * (C(1) - y); }
// d gelu / dx = Phi(x) + x phi(x).
template <class C> KILN_HD C gelu_grad(C dy, C x) {
  const C cdf = C(0.5) * (C(1) + fm::erf(x * C(0.70710678118654752440)));
  const C pdf = C(0.39894228040143267794) * fm::exp(C(-0.5) * x * x);
  return dy * (cdf + x * pdf);
}
template <class C> KILN_HD C elu_grad(C dy, C x, C alpha) { return x > C(0) ? dy : dy * alpha * fm::exp(x); }
template <class C> KILN_HD C selu_grad(C dy, C x) {
  return dy * C(kSeluScale) * (x > C(0) ? C(1) : C(kSeluAlpha) * fm::exp(x));
}
// d softplus / dx = sigmoid(beta x), 1 past the threshold (PyTorch's).
template <class C> KILN_HD C softplus_grad(C dy, C x, C beta, C threshold) {
  const C bx = beta * x;
  return bx > threshold ? dy : dy / (C(1) + fm::exp(-bx));
}

}  // namespace kiln::formulas
