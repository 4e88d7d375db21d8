// The per-element formulas both backends compile (src/core/formulas: the CPU
// backend's loops and the CUDA kernels call the same functions), checked on
// the host against references computed another way: long double closed
// forms, central finite differences for the gradients, torch.optim's update
// rules as PyTorch documents them (bias-corrected moments), and an exact
// nearest-neighbour search for bf16 rounding. Every CPU test of the kernels
// runs these formulas too; this pins each one down by itself.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "backend_harness.hpp"
#include "core/dtype.hpp"
#include "core/formulas/activations.hpp"
#include "core/formulas/bf16.hpp"
#include "core/formulas/losses.hpp"
#include "core/formulas/optimizers.hpp"

namespace f = kiln::formulas;
using kiln::test::g_case;

namespace {

void check(bool ok, const char *what, double got = 0, double want = 0) {
  if (ok) return;
  char values[96];
  std::snprintf(values, sizeof values, ": got %.17g, want %.17g", got, want);
  kiln::test::expect(false, what + std::string(values));
}

// |got - want| <= tol * max(1, |want|)
void close(double got, double want, double tol, const char *what) {
  check(std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want)), what, got, want);
}

using LD = long double;

void activations() {
  g_case = "activations";
  const double xs[] = {-30, -5.5, -1, -0.25, -1e-8, 0, 1e-8, 0.3, 1, 2.5, 7, 30};
  for (double x : xs) {
    const LD xl = x;
    close(f::relu(x), x < 0 ? 0 : x, 0, "relu");
    close(f::leaky_relu(x, 0.01), x < 0 ? 0.01 * x : x, 1e-15, "leaky_relu");
    close(f::tanh_act(x), double(std::tanh(xl)), 1e-15, "tanh");
    close(f::sigmoid(x), double(1 / (1 + std::exp(-xl))), 1e-15, "sigmoid");
    close(f::gelu(x), double(0.5L * xl * (1 + std::erf(xl / std::sqrt(2.0L)))), 1e-14, "gelu");
    // float, as the kernels compute f32/f16/bf16 data: within a few f32 ulps
    close(f::sigmoid(float(x)), double(1 / (1 + std::exp(-xl))), 4e-7, "sigmoid f32");
    close(f::gelu(float(x)), double(0.5L * xl * (1 + std::erf(xl / std::sqrt(2.0L)))), 4e-7, "gelu f32");

    // Gradients against central differences of the forward formulas.
    const double h = 1e-6, dy = 0.75;
    auto diff = [&](auto fn) { return dy * (fn(x + h) - fn(x - h)) / (2 * h); };
    if (std::fabs(x) > 1e-3) {  // away from the kinks
      close(f::relu_grad(dy, f::relu(x)), diff([](double v) { return f::relu(v); }), 1e-8, "relu_grad");
      close(f::leaky_relu_grad(dy, f::leaky_relu(x, 0.01), 0.01),
            diff([](double v) { return f::leaky_relu(v, 0.01); }), 1e-8, "leaky_relu_grad");
    }
    close(f::tanh_grad(dy, f::tanh_act(x)), diff([](double v) { return f::tanh_act(v); }), 1e-8, "tanh_grad");
    close(f::sigmoid_grad(dy, f::sigmoid(x)), diff([](double v) { return f::sigmoid(v); }), 1e-8, "sigmoid_grad");
    close(f::gelu_grad(dy, x), diff([](double v) { return f::gelu(v); }), 1e-8, "gelu_grad");

    // ELU, SELU, Softplus against their definitions in long double.
    const LD selu_alpha = 1.6732632423543772848170429916717L, selu_scale = 1.0507009873554804934193349852946L;
    for (double alpha : {1.0, 0.3, -0.5}) {
      close(f::elu(x, alpha), double(xl > 0 ? xl : alpha * (std::exp(xl) - 1)), 1e-15, "elu");
      close(f::elu(float(x), float(alpha)), double(xl > 0 ? xl : alpha * (std::exp(xl) - 1)), 4e-7, "elu f32");
      if (std::fabs(x) > 1e-3)
        close(f::elu_grad(dy, x, alpha), diff([&](double v) { return f::elu(v, alpha); }), 1e-8, "elu_grad");
    }
    close(f::selu(x), double(selu_scale * (xl > 0 ? xl : selu_alpha * (std::exp(xl) - 1))), 1e-15, "selu");
    if (std::fabs(x) > 1e-3) close(f::selu_grad(dy, x), diff([](double v) { return f::selu(v); }), 1e-8, "selu_grad");
    for (double beta : {1.0, 2.0, 0.5}) {
      for (double threshold : {20.0, 1.0}) {
        const LD want = beta * xl > threshold ? xl : std::log1p(std::exp(beta * xl)) / beta;
        close(f::softplus(x, beta, threshold), double(want), 1e-15, "softplus");
        close(f::softplus(float(x), float(beta), float(threshold)), double(want), 4e-7, "softplus f32");
        if (std::fabs(beta * x - threshold) > 1e-3)  // away from the step at the threshold
          close(f::softplus_grad(dy, x, beta, threshold),
                diff([&](double v) { return f::softplus(v, beta, threshold); }), 1e-8, "softplus_grad");
      }
    }
  }
  // Softplus with a threshold past what exp can hold stays finite.
  check(f::softplus(500.0, 1.0, 1000.0) == 500.0 && f::softplus(-500.0, 1.0, 1000.0) >= 0,
        "softplus without overflow");
  check(f::softplus_grad(1.0, 500.0, 1.0, 1000.0) == 1.0, "softplus_grad without overflow");
  // NaN stays NaN, as in PyTorch.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  check(std::isnan(f::relu(nan)) && std::isnan(f::leaky_relu(nan, 0.1)) && std::isnan(f::gelu(nan)) &&
            std::isnan(f::sigmoid(nan)) && std::isnan(f::elu(nan, 1.0)) && std::isnan(f::selu(nan)) &&
            std::isnan(f::softplus(nan, 1.0, 20.0)),
        "NaN in, NaN out");
  check(f::sigmoid(-1000.0) == 0 && f::sigmoid(1000.0) == 1, "sigmoid saturates without NaN");
}

void losses() {
  g_case = "cross entropy";
  const double row[] = {1.5, -0.5, 3.25, 0.0, -2.0};
  const int n = 5, label = 2;
  const double scale = 0.125;
  double mx = row[0];
  for (double v : row) mx = std::max(mx, v);
  double s = 0;
  for (double v : row) s += std::exp(v - mx);
  LD sum_l = 0;
  for (double v : row) sum_l += std::exp(LD(v));
  close(f::cross_entropy_row_loss(s, row[label], mx, 0.0, 0.0), double(std::log(sum_l) - LD(row[label])), 1e-14,
        "loss = -log softmax[label]");
  double grad_sum = 0;
  const auto onehot = f::smoothed_target<double>(scale, 0.0, n);
  for (int j = 0; j < n; ++j) {
    const double g = f::cross_entropy_grad(std::exp(row[j] - mx), scale / s, j == label, onehot);
    const double softmax = double(std::exp(LD(row[j])) / sum_l);
    close(g, scale * (softmax - (j == label ? 1 : 0)), 1e-14, "grad = scale (softmax - onehot)");
    grad_sum += g;
  }
  close(grad_sum, 0, 1e-15, "row gradient sums to 0");

  // Label smoothing e: the target q = (1 - e) onehot + e / n, the loss
  // -sum_j q_j log softmax_j summed in long double from its definition.
  g_case = "cross entropy, label smoothing";
  for (double e : {0.1, 0.5, 1.0}) {
    double mean_shift = 0;
    for (double v : row) mean_shift += v - mx;
    mean_shift /= n;
    LD want = 0;
    for (int j = 0; j < n; ++j) {
      const LD q = (1 - LD(e)) * (j == label ? 1 : 0) + LD(e) / n;
      want -= q * (LD(row[j]) - std::log(sum_l));
    }
    close(f::cross_entropy_row_loss(s, row[label], mx, e, mean_shift), double(want), 1e-14,
          "loss = -sum q log softmax");
    const auto target = f::smoothed_target<double>(scale, e, n);
    grad_sum = 0;
    for (int j = 0; j < n; ++j) {
      const double g = f::cross_entropy_grad(std::exp(row[j] - mx), scale / s, j == label, target);
      const LD q = (1 - LD(e)) * (j == label ? 1 : 0) + LD(e) / n;
      close(g, double(scale * (std::exp(LD(row[j])) / sum_l - q)), 1e-14, "grad = scale (softmax - q)");
      grad_sum += g;
    }
    close(grad_sum, 0, 1e-15, "smoothed row gradient sums to 0");
  }

  g_case = "mse";
  for (double p : {-2.5, 0.0, 1.0, 3.75}) {
    const f::LossTerm<double> t = f::mse_term(p, 0.5, 2 * scale);
    close(t.loss, (p - 0.5) * (p - 0.5), 0, "loss");
    close(t.grad, scale * 2 * (p - 0.5), 0, "grad");
  }

  g_case = "bce with logits";
  for (double x : {-40.0, -3.0, -0.5, 0.0, 0.5, 3.0, 40.0}) {
    for (double y : {0.0, 0.3, 1.0}) {
      const f::LossTerm<double> t = f::bce_with_logits_term(x, y, scale);
      const LD sig = 1 / (1 + std::exp(-LD(x)));
      const LD want = -(LD(y) * std::log(sig) + (1 - LD(y)) * std::log1p(-sig));
      if (std::fabs(x) < 30) close(t.loss, double(want), 1e-13, "loss = -(y log s + (1 - y) log(1 - s))");
      check(std::isfinite(t.loss) && std::isfinite(t.grad), "finite for large |x|", t.loss);
      close(t.grad, double(scale * (sig - LD(y))), 1e-15, "grad = scale (sigmoid - y)");
      const double h = 1e-6;
      const double fd = (f::bce_with_logits_term(x + h, y, scale).loss - f::bce_with_logits_term(x - h, y, scale).loss) /
                        (2 * h) * scale;
      close(t.grad, fd, 1e-8, "grad = d loss / dx");
    }
  }

  g_case = "dropout";
  close(f::dropout_keep_scale(0.0), 1, 0, "p = 0");
  close(f::dropout_keep_scale(0.25), 1 / 0.75, 0, "p = 0.25");
  close(f::dropout_keep_scale(1.0), 0, 0, "p = 1 keeps nothing");
}

void optimizers() {
  g_case = "clip";
  close(f::clip_factor(1.0, 4.0), 1.0 / (4.0 + 1e-6), 0, "max_norm / (norm + 1e-6)");

  // torch.optim.SGD's documented algorithm over several steps, per option.
  g_case = "sgd";
  for (int option = 0; option < 4; ++option) {
    const double lr = 0.1, momentum = option >= 1 ? 0.9 : 0, wd = option >= 2 ? 0.01 : 0;
    const bool nesterov = option == 3;
    double p = 1.5, v = 0;   // the formula's
    LD rp = 1.5L, rb = 0;    // the reference's
    const double grads[] = {0.5, -0.25, 0.125, 1.0};
    for (int t = 0; t < 4; ++t) {
      p = f::sgd_step(p, grads[t], &v, lr, momentum, wd, wd != 0, momentum != 0, nesterov, t == 0);
      LD g = grads[t] + LD(wd) * rp;
      if (momentum != 0) {
        rb = t == 0 ? g : LD(momentum) * rb + g;
        g = nesterov ? g + LD(momentum) * rb : rb;
      }
      rp -= LD(lr) * g;
      close(p, double(rp), 1e-15, "parameter after each step");
    }
  }

  // Adam / AdamW as PyTorch documents them: bias-corrected moments m_hat,
  // v_hat and p -= lr m_hat / (sqrt(v_hat) + eps); kiln's form is the
  // algebraically equal one torch computes.
  g_case = "adam";
  for (int decoupled = 0; decoupled < 2; ++decoupled) {
    for (double beta1 : {0.9, 0.3}) {  // both branches of torch's lerp
      const double lr = 1e-2, beta2 = 0.999, eps = 1e-8, wd = 0.05;
      double p = 0.8, m = 0, v = 0;
      LD rp = 0.8L, rm = 0, rv = 0;
      const double grads[] = {0.3, -0.7, 0.05, 0.9, -0.2};
      for (int t = 1; t <= 5; ++t) {
        const f::AdamStep<double> k = f::adam_step_constants<double>(lr, t, beta1, beta2, eps, wd);
        p = f::adam_update_step(p, grads[t - 1], &m, &v, k, !decoupled, bool(decoupled));
        LD g = grads[t - 1];
        if (decoupled) rp *= 1 - LD(lr) * LD(wd);
        else g += LD(wd) * rp;
        rm = LD(beta1) * rm + (1 - LD(beta1)) * g;
        rv = LD(beta2) * rv + (1 - LD(beta2)) * g * g;
        const LD m_hat = rm / (1 - std::pow(LD(beta1), t)), v_hat = rv / (1 - std::pow(LD(beta2), t));
        rp -= LD(lr) * m_hat / (std::sqrt(v_hat) + LD(eps));
        close(p, double(rp), 1e-13, "parameter after each step");
        close(m, double(rm), 1e-14, "first moment");
        close(v, double(rv), 1e-14, "second moment");
      }
    }
  }
  // Step 0 (and below) counts as the first update.
  const f::AdamStep<double> k0 = f::adam_step_constants<double>(1, 0, 0.9, 0.999, 1e-8, 0);
  const f::AdamStep<double> k1 = f::adam_step_constants<double>(1, 1, 0.9, 0.999, 1e-8, 0);
  check(k0.step_size == k1.step_size && k0.bc2_sqrt == k1.bc2_sqrt, "step 0 counts as step 1");
}

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// The bf16 nearest to x, ties to the even mantissa, found by comparing the
// exact distances to the two bf16 values around it.
uint16_t nearest_bf16(float x) {
  const uint32_t u = bits_of(x);
  const uint16_t lo = uint16_t(u >> 16), hi = uint16_t(lo + 1);  // same sign: truncation and the next one up
  const long double dl = std::fabs(LD(x) - LD(from_bits(uint32_t(lo) << 16)));
  // Past the largest finite bf16 comes infinity, which IEEE rounding takes
  // as 2^128 for the distance (x rounds to it from the halfway point up).
  const float above = from_bits(uint32_t(hi) << 16);
  const LD above_value = std::isinf(above) ? std::copysign(std::ldexp(1.0L, 128), LD(x)) : LD(above);
  const long double dh = std::fabs(LD(x) - above_value);
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

void bf16() {
  g_case = "bf16";
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any;
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = any(rng);
    const float x = from_bits(u);
    if (std::isnan(x) || std::isinf(x)) continue;
    const uint16_t got = f::bf16_bits_from_f32_bits(u), want = nearest_bf16(x);
    if (got != want) {
      check(false, "random f32 rounds to the nearest bf16, ties to even", got, want);
      break;
    }
    ++checked;
  }
  check(checked > 190000, "most random bit patterns were finite");
  // Exact ties: halfway between two bf16 values goes to the even one.
  check(f::bf16_bits_from_f32_bits(0x3f808000u) == 0x3f80, "tie to even (down)");
  check(f::bf16_bits_from_f32_bits(0x3f818000u) == 0x3f82, "tie to even (up)");
  check(f::bf16_bits_from_f32_bits(0x7f7fffffu) == 0x7f80, "the largest f32 overflows to infinity");
  check(f::bf16_bits_from_f32_bits(0x7f800000u) == 0x7f80 && f::bf16_bits_from_f32_bits(0xff800000u) == 0xff80,
        "infinities stay");
  check(f::bf16_bits_from_f32_bits(0x80000000u) == 0x8000, "-0 stays -0");
  const uint16_t nan = f::bf16_bits_from_f32_bits(0x7f800001u);  // a signalling NaN with only a low payload bit
  check((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0, "a NaN stays a NaN (quiet), never infinity");
  check(f::bf16_bits_from_f32_bits(0xffc00000u) == 0xffc0, "a negative quiet NaN keeps its sign");
  // core's host conversion is this formula.
  check(kiln::f32_to_bf16(1.00390625f) == f::bf16_bits_from_f32_bits(bits_of(1.00390625f)), "core uses it");
  check(kiln::bf16_to_f32(0x3f80) == 1.0f, "bf16 back to f32 is exact");
}

}  // namespace

int main() {
  activations();
  losses();
  optimizers();
  bf16();
  return kiln::test::finish("formulas_test");
}
