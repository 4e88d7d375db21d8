// Scalar math of the float unary ops and of the activations' derivatives,
// shared by the elementwise kernels and the fused nn kernels so both give
// the same bits. Each op is a type so that loops are specialised per op. The
// activations are core/formulas/activations.hpp's, the CUDA kernels' own
// formulas, so the CPU tests check the GPU's arithmetic too.
// NaN inputs give NaN outputs, as in PyTorch (hence `x < 0 ? ... : x`).
#pragma once

#include <cmath>
#include <string>

#include "core/backend.hpp"
#include "core/error.hpp"
#include "core/formulas/activations.hpp"

namespace kiln::cpu::act {

struct Neg { template <class C> C operator()(C x) const { return -x; } };
struct Abs { template <class C> C operator()(C x) const { return std::fabs(x); } };
struct Exp { template <class C> C operator()(C x) const { return std::exp(x); } };
struct Log { template <class C> C operator()(C x) const { return std::log(x); } };
struct Sqrt { template <class C> C operator()(C x) const { return std::sqrt(x); } };
struct Identity { template <class C> C operator()(C x) const { return x; } };
struct Relu { template <class C> C operator()(C x) const { return formulas::relu(x); } };
struct Tanh { template <class C> C operator()(C x) const { return formulas::tanh_act(x); } };
struct Sigmoid { template <class C> C operator()(C x) const { return formulas::sigmoid(x); } };
struct Gelu { template <class C> C operator()(C x) const { return formulas::gelu(x); } };
struct LeakyRelu {
  double alpha;
  template <class C> C operator()(C x) const { return formulas::leaky_relu(x, C(alpha)); }
};
struct Elu {
  double alpha;
  template <class C> C operator()(C x) const { return formulas::elu(x, C(alpha)); }
};
struct Selu { template <class C> C operator()(C x) const { return formulas::selu(x); } };
struct Softplus {
  double beta, threshold;
  template <class C> C operator()(C x) const { return formulas::softplus(x, C(beta), C(threshold)); }
};

// Calls f(Op{}) for op, with its parameters (core/backend.hpp's UnaryOp).
template <class F>
void with_unary(UnaryOp op, double alpha, double threshold, F &&f) {
  switch (op) {
    case UnaryOp::Neg: f(Neg{}); return;
    case UnaryOp::Abs: f(Abs{}); return;
    case UnaryOp::Exp: f(Exp{}); return;
    case UnaryOp::Log: f(Log{}); return;
    case UnaryOp::Sqrt: f(Sqrt{}); return;
    case UnaryOp::Relu: f(Relu{}); return;
    case UnaryOp::Gelu: f(Gelu{}); return;
    case UnaryOp::Tanh: f(Tanh{}); return;
    case UnaryOp::Sigmoid: f(Sigmoid{}); return;
    case UnaryOp::LeakyRelu: f(LeakyRelu{alpha}); return;
    case UnaryOp::Identity: f(Identity{}); return;
    case UnaryOp::Elu: f(Elu{alpha}); return;
    case UnaryOp::Selu: f(Selu{}); return;
    case UnaryOp::Softplus: f(Softplus{alpha, threshold}); return;
  }
  fail(KILN_ERROR_INTERNAL, "unknown unary op " + std::to_string(int(op)));
}

// Derivatives, as the gradient dy * act'(.) computed from what the
// activation's backward reads: the output y (ReLU, LeakyReLU, Tanh, Sigmoid,
// as PyTorch does) or the pre-activation x (act_grad_reads_pre).
struct ReluGrad { template <class C> C operator()(C dy, C, C y) const { return formulas::relu_grad(dy, y); } };
struct LeakyReluGrad {
  double alpha;
  template <class C> C operator()(C dy, C, C y) const { return formulas::leaky_relu_grad(dy, y, C(alpha)); }
};
struct TanhGrad { template <class C> C operator()(C dy, C, C y) const { return formulas::tanh_grad(dy, y); } };
struct SigmoidGrad { template <class C> C operator()(C dy, C, C y) const { return formulas::sigmoid_grad(dy, y); } };
struct IdentityGrad { template <class C> C operator()(C dy, C, C) const { return dy; } };
struct GeluGrad { template <class C> C operator()(C dy, C x, C) const { return formulas::gelu_grad(dy, x); } };
struct EluGrad {
  double alpha;
  template <class C> C operator()(C dy, C x, C) const { return formulas::elu_grad(dy, x, C(alpha)); }
};
struct SeluGrad { template <class C> C operator()(C dy, C x, C) const { return formulas::selu_grad(dy, x); } };
struct SoftplusGrad {
  double beta, threshold;
  template <class C> C operator()(C dy, C x, C) const { return formulas::softplus_grad(dy, x, C(beta), C(threshold)); }
};

// Calls f(Grad{}) for the derivative of activation `act`, with its
// parameters; INTERNAL for a unary op that is not an activation.
template <class F>
void with_act_grad(UnaryOp act, double alpha, double threshold, F &&f) {
  switch (act) {
    case UnaryOp::Relu: f(ReluGrad{}); return;
    case UnaryOp::LeakyRelu: f(LeakyReluGrad{alpha}); return;
    case UnaryOp::Tanh: f(TanhGrad{}); return;
    case UnaryOp::Sigmoid: f(SigmoidGrad{}); return;
    case UnaryOp::Gelu: f(GeluGrad{}); return;
    case UnaryOp::Elu: f(EluGrad{alpha}); return;
    case UnaryOp::Selu: f(SeluGrad{}); return;
    case UnaryOp::Softplus: f(SoftplusGrad{alpha, threshold}); return;
    case UnaryOp::Identity: f(IdentityGrad{}); return;
    default: break;
  }
  fail(KILN_ERROR_INTERNAL, "an activation's backward called with a unary op that is not an activation");
}

}  // namespace kiln::cpu::act
