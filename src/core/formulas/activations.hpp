// The activations and their gradients, one formula each for the CPU backend
// (backend/cpu/activation_math.hpp wraps them for its loops) and the CUDA
// kernels (backend/cuda/device_math.cuh's unary_op and act_grad), so the CPU
// tests exercise the GPU's arithmetic. C is the compute type (f32 for
// f16/bf16 data). NaN in gives NaN out, as in PyTorch (hence x < 0 ? ... : x).
// Gradients are dy * act'(.) from what the activation's backward reads: the
// output y (ReLU, LeakyReLU, Tanh, Sigmoid, as PyTorch does) or the
// pre-activation x (GELU).
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

}  // namespace kiln::formulas
