// vectorized()'s variants (src/backend/cpu/vectorize.hpp) against each
// other on this CPU, kernel by kernel: the AVX2 one is compiled without FMA,
// so it must give the baseline build's results bit for bit; the AVX-512 one
// (where the CPU has it) may contract a multiply and an add, so it must
// agree to a few units of the last place. Every kernel that runs through
// vectorized() is here, in f32, f64 and bf16, at sizes with partial vectors
// (131 columns) and split over two threads. backend_test checks the values
// themselves against float64 references on whichever variant Auto picks.
// Exits 77 on a CPU without AVX2 and FMA, where only the baseline runs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend_harness.hpp"
#include "core/dtype.hpp"
#include "core/rng.hpp"
#include "core/thread_pool.hpp"

using namespace kiln;
using kiln::test::g_case;

namespace {

constexpr int64_t kRows = 37, kCols = 131, kCount = kRows * kCols;

// Typed storage for one buffer of a kernel's operands, filled from an RNG
// stream over [lo, hi).
struct Buffer {
  DType t;
  std::vector<unsigned char> bytes;
  Buffer(DType type, int64_t n, uint64_t seed, double lo, double hi) : t(type), bytes(size_t(n) * dtype_size(type)) {
    for (int64_t i = 0; i < n; ++i) set(i, lo + (hi - lo) * rng_uniform(seed, uint64_t(i)));
  }
  void set(int64_t i, double v) {
    unsigned char *p = bytes.data() + size_t(i) * dtype_size(t);
    if (t == DType::F64) std::memcpy(p, &v, 8);
    else if (t == DType::F32) { const float f = float(v); std::memcpy(p, &f, 4); }
    else { const uint16_t h = f32_to_bf16(float(v)); std::memcpy(p, &h, 2); }
  }
  double get(int64_t i) const {
    const unsigned char *p = bytes.data() + size_t(i) * dtype_size(t);
    if (t == DType::F64) { double v; std::memcpy(&v, p, 8); return v; }
    if (t == DType::F32) { float f; std::memcpy(&f, p, 4); return f; }
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bf16_to_f32(h);
  }
  int64_t size() const { return int64_t(bytes.size() / dtype_size(t)); }
  void *data() { return bytes.data(); }
};

// One kernel call: given fresh inputs (the same on every run), it writes its
// results into the buffers it returns.
using Case = std::function<std::vector<Buffer>(ThreadPool &)>;

// The largest difference between two runs' results, in units of the
// dtype's last place at the value's magnitude (0: identical bits).
double ulps_apart(const std::vector<Buffer> &x, const std::vector<Buffer> &y) {
  double worst = 0;
  for (size_t b = 0; b < x.size(); ++b) {
    const double eps = x[b].t == DType::F64 ? 0x1p-52 : x[b].t == DType::F32 ? 0x1p-23 : 0x1p-7;
    for (int64_t i = 0; i < x[b].size(); ++i) {
      const double u = x[b].get(i), v = y[b].get(i);
      if (std::isnan(u) || std::isnan(v)) {
        if (std::isnan(u) != std::isnan(v)) return INFINITY;
        continue;
      }
      // Values under 1 in magnitude count in ulps of 1: an update that
      // lands near zero keeps the absolute error of its operands.
      const double scale = std::max({std::fabs(u), std::fabs(v), 1.0});
      worst = std::max(worst, std::fabs(u - v) / (scale * eps));
    }
  }
  return worst;
}

bool same_bits(const std::vector<Buffer> &x, const std::vector<Buffer> &y) {
  for (size_t b = 0; b < x.size(); ++b)
    if (x[b].bytes != y[b].bytes) return false;
  return true;
}

std::vector<Buffer> run(ThreadPool &pool, const Case &c, cpu::LoopVectors which) {
  cpu::set_loop_vectors(which);
  std::vector<Buffer> out = c(pool);
  cpu::set_loop_vectors(cpu::LoopVectors::Auto);
  return out;
}

struct Act {
  const char *name;
  UnaryOp op;
  double alpha, threshold;
};
const Act kActs[] = {{"identity", UnaryOp::Identity, 0, 0}, {"relu", UnaryOp::Relu, 0, 0},
                     {"leaky_relu", UnaryOp::LeakyRelu, 0.01, 0}, {"gelu", UnaryOp::Gelu, 0, 0},
                     {"tanh", UnaryOp::Tanh, 0, 0},          {"sigmoid", UnaryOp::Sigmoid, 0, 0},
                     {"elu", UnaryOp::Elu, 1.0, 0},           {"selu", UnaryOp::Selu, 0, 0},
                     {"softplus", UnaryOp::Softplus, 1.0, 20}};

// Every kernel that runs through vectorized(), as named cases.
std::vector<std::pair<std::string, Case>> cases(DType t) {
  std::vector<std::pair<std::string, Case>> all;
  for (const Act &act : kActs) {
    all.push_back({std::string("bias_act ") + act.name, [t, act](ThreadPool &pool) {
                     Buffer y(t, kCount, 1, -4, 4), pre(t, kCount, 0, 0, 0);
                     Buffer bias(t, kCols, 2, -1, 1);
                     BiasActArgs a;
                     a.t = t, a.rows = kRows, a.cols = kCols, a.y = y.data(), a.bias = bias.data();
                     a.act = act.op, a.alpha = act.alpha, a.threshold = act.threshold, a.pre = pre.data();
                     cpu::bias_act(pool, a);
                     return std::vector<Buffer>{std::move(y), std::move(pre)};
                   }});
    // The gradient reads the pre-activation or the output; both are given
    // (drawn, not computed: the kernels do not check them against each other).
    all.push_back({std::string("act_backward ") + act.name, [t, act](ThreadPool &pool) {
                     Buffer dy(t, kCount, 3, -1, 1), pre(t, kCount, 4, -4, 4), y(t, kCount, 5, 0.01, 0.99);
                     Buffer dx(t, kCount, 0, 0, 0);
                     ActBackwardArgs a;
                     a.t = t, a.n = kCount, a.act = act.op, a.alpha = act.alpha, a.threshold = act.threshold;
                     a.dy = dy.data(), a.pre = pre.data(), a.y = y.data(), a.dx = dx.data();
                     cpu::act_backward(pool, a);
                     return std::vector<Buffer>{std::move(dx)};
                   }});
    all.push_back({std::string("act_backward_bias_grad ") + act.name, [t, act](ThreadPool &pool) {
                     Buffer dy(t, kCount, 6, -1, 1), pre(t, kCount, 7, -4, 4), y(t, kCount, 8, 0.01, 0.99);
                     Buffer db(t, kCols, 9, -1, 1);
                     ActBackwardArgs a;
                     a.t = t, a.n = kCount, a.act = act.op, a.alpha = act.alpha, a.threshold = act.threshold;
                     a.dy = dy.data(), a.pre = pre.data(), a.y = y.data(), a.dx = dy.data();  // in place
                     BiasGradArgs b;
                     b.t = t, b.rows = kRows, b.cols = kCols, b.dy = dy.data(), b.db = db.data(), b.beta = 0.5;
                     cpu::act_backward_bias_grad(pool, a, b);
                     return std::vector<Buffer>{std::move(dy), std::move(db)};
                   }});
  }
  all.push_back({"bias_grad", [t](ThreadPool &pool) {
                   Buffer dy(t, kCount, 10, -1, 1), db(t, kCols, 11, -1, 1);
                   BiasGradArgs b;
                   b.t = t, b.rows = kRows, b.cols = kCols, b.dy = dy.data(), b.db = db.data(), b.beta = 0.5;
                   cpu::bias_grad(pool, b);
                   return std::vector<Buffer>{std::move(db)};
                 }});
  for (bool nesterov : {false, true}) {
    all.push_back({nesterov ? "sgd_update nesterov" : "sgd_update momentum", [t, nesterov](ThreadPool &pool) {
                     Buffer w(t, kCount, 12, -1, 1), g(t, kCount, 13, -1, 1), v(t, kCount, 0, 0, 0);
                     SgdArgs a;
                     a.t = t, a.n = kCount, a.params = w.data(), a.grads = g.data(), a.velocity = v.data();
                     a.momentum = 0.9, a.weight_decay = 1e-4, a.nesterov = nesterov;
                     for (int64_t s = 0; s < 3; ++s) cpu::sgd_update(pool, a, StepParams{0.05, s, 0, 0});
                     return std::vector<Buffer>{std::move(w), std::move(v)};
                   }});
  }
  for (bool decoupled : {false, true}) {
    all.push_back({decoupled ? "adam_update adamw" : "adam_update adam", [t, decoupled](ThreadPool &pool) {
                     Buffer w(t, kCount, 14, -1, 1), g(t, kCount, 15, -1, 1);
                     Buffer m(t, kCount, 0, 0, 0), v(t, kCount, 0, 0, 0);
                     AdamArgs a;
                     a.t = t, a.n = kCount, a.params = w.data(), a.grads = g.data(), a.m = m.data(), a.v = v.data();
                     a.weight_decay = 0.01, a.decoupled = decoupled;
                     for (int64_t s = 0; s < 3; ++s) cpu::adam_update(pool, a, StepParams{0.001, s, 0, 0});
                     return std::vector<Buffer>{std::move(w), std::move(m), std::move(v)};
                   }});
  }
  all.push_back({"dropout and its backward", [t](ThreadPool &pool) {
                   Buffer x(t, kCount, 16, -1, 1), y(t, kCount, 0, 0, 0), dy(t, kCount, 17, -1, 1);
                   Buffer dx(t, kCount, 0, 0, 0);
                   std::vector<uint8_t> mask(static_cast<size_t>(kCount));
                   DropoutArgs a;
                   a.t = t, a.n = kCount, a.x = x.data(), a.y = y.data(), a.mask = mask.data(), a.p = 0.3;
                   cpu::dropout(pool, a, 42);
                   DropoutBackwardArgs b;
                   b.t = t, b.n = kCount, b.dy = dy.data(), b.mask = mask.data(), b.p = 0.3, b.dx = dx.data();
                   cpu::dropout_backward(pool, b);
                   return std::vector<Buffer>{std::move(y), std::move(dx)};
                 }});
  // A block of rows and a row wider than a vector; the tutorial's 10
  // classes over several blocks of rows and both threads. The summed loss
  // and accuracy come back as f32: float exps summed in another order
  // differ from the baseline's in float's last place, not double's.
  for (const auto &[rows, cols] : {std::pair<int64_t, int64_t>{kRows, kCols}, {1000, 10}}) {
    for (double smoothing : {0.0, 0.1}) {
      for (bool gradient : {true, false}) {
        const std::string name = "cross_entropy " + std::to_string(rows) + "x" + std::to_string(cols) +
                                 (smoothing != 0 ? " smoothed" : "") + (gradient ? "" : " loss only");
        all.push_back({name, [t, rows, cols, smoothing, gradient](ThreadPool &pool) {
                         Buffer logits(t, rows * cols, 19, -8, 8), dlogits(t, rows * cols, 0, 0, 0);
                         std::vector<int64_t> labels(static_cast<size_t>(rows));
                         for (int64_t r = 0; r < rows; ++r)
                           labels[size_t(r)] = int64_t(rng_bits(20, uint64_t(r)) % uint64_t(cols));
                         double stats[2] = {0, 0};
                         LossArgs a;
                         a.t = t, a.rows = rows, a.cols = cols, a.pred = logits.data(), a.target = labels.data();
                         a.grad_scale = 1.0 / double(rows), a.dpred = gradient ? dlogits.data() : nullptr;
                         a.stats = stats, a.label_smoothing = smoothing;
                         cpu::cross_entropy(pool, a);
                         Buffer sums(DType::F32, 2, 0, 0, 0);
                         sums.set(0, stats[0]), sums.set(1, stats[1]);
                         return std::vector<Buffer>{std::move(dlogits), std::move(sums)};
                       }});
      }
    }
  }
  all.push_back({"gather u8 scaled", [t](ThreadPool &pool) {
                   std::vector<uint8_t> x(static_cast<size_t>(kCount));
                   for (size_t i = 0; i < x.size(); ++i) x[i] = uint8_t(rng_bits(18, i));
                   std::vector<int64_t> labels(static_cast<size_t>(kRows)), order(static_cast<size_t>(kRows)), out_labels(static_cast<size_t>(kRows));
                   for (int64_t r = 0; r < kRows; ++r) labels[size_t(r)] = r % 10, order[size_t(r)] = (r * 7) % kRows;
                   Buffer out(t, kCount, 0, 0, 0);
                   GatherArgs a;
                   a.order = order.data(), a.count = kRows, a.x_type = DType::U8, a.x = x.data(), a.cols = kCols;
                   a.scale = 1.0 / 255, a.shift = -0.5, a.out_x_type = t, a.out_x = out.data();
                   a.y = labels.data(), a.out_y = out_labels.data();
                   cpu::gather(pool, a, order.data());  // the rows: order from the step's offset, 0 here
                   return std::vector<Buffer>{std::move(out)};
                 }});
  return all;
}

}  // namespace

int main() {
  if (!cpu::avx2_fma_available()) {
    std::fprintf(stderr, "skipped: this CPU has no AVX2 and FMA, so only the baseline variant runs\n");
    return 77;
  }
  const bool avx512 = cpu::avx512_available();
  ThreadPool pool(2);
  double worst_avx512 = 0;
  int checked = 0;
  for (DType t : {DType::F32, DType::F64, DType::BF16}) {
    for (const auto &[name, c] : cases(t)) {
      g_case = name + " " + dtype_name(t);
      const std::vector<Buffer> baseline = run(pool, c, cpu::LoopVectors::Baseline);
      const std::vector<Buffer> avx2 = run(pool, c, cpu::LoopVectors::Avx2);
      CHECK(same_bits(avx2, baseline));
      if (avx512) {
        // A contracted multiply-add rounds once where the baseline rounds
        // twice: a few ulps after a chain of them (three optimizer steps,
        // an activation's formula); stored in bf16, a last bit flipped by
        // that, carried through three steps of bf16 optimizer state. A
        // wrong formula or a lane out of place is off by far more.
        const double apart = ulps_apart(run(pool, c, cpu::LoopVectors::Auto), baseline);
        worst_avx512 = std::max(worst_avx512, t == DType::BF16 ? 0.0 : apart);
        CHECK(apart <= (t == DType::BF16 ? 4 : 256));
      }
      ++checked;
    }
  }
  if (kiln::test::g_failures) {
    std::fprintf(stderr, "%d check(s) failed\n", kiln::test::g_failures);
    return 1;
  }
  std::printf("cpu_vectorize_test: %d kernel cases, AVX2 identical to the baseline", checked);
  if (avx512) std::printf(", AVX-512 within %.3g ulps of it", worst_avx512);
  std::printf("\n");
  return 0;
}
