// The CPU's two bf16 product paths against each other and a float64
// reference: kiln's AVX-512 BF16 kernel (bf16_gemm_avx512.hpp, where the CPU
// has it) and the conversion to f32 (forced with set_bf16_products). Exits
// 77 on a CPU without AVX-512 BF16, where only the conversion path exists
// (backend_test covers it there).
//
// Both multiply bf16 values exactly and add in fp32, in different orders,
// so they agree to the fp32 rounding of the sums before the one rounding of
// each result to bf16: exactly where the sums are exact (small integers),
// and within a bound from the sums' rounding elsewhere.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_features.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend_harness.hpp"
#include "core/rng.hpp"

using namespace kiln;
using kiln::test::g_case;

namespace {

double g_worst = 0;  // the largest |native - f64| / (|f64| + the sums' bound) of the real cases

struct Shape {
  int64_t m, n, k;
};

// Every branch of the kernel and its caller: odd and even k, partial row
// and column blocks, one row, row panels (m >= n) and column panels
// (m < n) split over the pool's threads.
const Shape kShapes[] = {{1, 1, 1},   {1, 1, 2},   {3, 5, 7},    {8, 32, 16},   {9, 33, 17},
                         {2, 100, 65}, {17, 40, 1}, {200, 70, 301}, {5, 300, 77}, {64, 64, 64}};

// A bf16 value drawn from stream `seed`: small integers (every sum of
// products exact in fp32) or reals in [-2, 2).
uint16_t draw(uint64_t seed, uint64_t i, bool integers) {
  const double u = rng_uniform(seed, i);
  return f32_to_bf16(integers ? float(std::floor(u * 9) - 4) : float(u * 4 - 2));
}

double value(uint16_t h) { return double(bf16_to_f32(h)); }

struct Case {
  Shape s;
  bool trans_a, trans_b, integers;
  double alpha, beta;
};

// C = alpha * op(A) op(B) + beta * C0 on `be` with bf16 products as `how`.
std::vector<uint16_t> run(Backend &be, cpu::Bf16Products how, const Case &c, const std::vector<uint16_t> &a,
                          const std::vector<uint16_t> &b, const std::vector<uint16_t> &c0) {
  std::vector<uint16_t> out = c0;
  cpu::set_bf16_products(how);
  GemmArgs g;
  g.t = DType::BF16, g.trans_a = c.trans_a, g.trans_b = c.trans_b;
  g.m = c.s.m, g.n = c.s.n, g.k = c.s.k, g.alpha = c.alpha, g.beta = c.beta;
  g.a = a.data(), g.b = b.data(), g.c = out.data();
  be.gemm(-1, g);
  cpu::set_bf16_products(cpu::Bf16Products::Auto);
  return out;
}

void check_case(Backend &be, const Case &c, uint64_t seed) {
  const int64_t m = c.s.m, n = c.s.n, k = c.s.k;
  g_case = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + (c.trans_a ? " A^T" : "") +
           (c.trans_b ? " B^T" : "") + (c.integers ? " integers" : " reals") + " beta " + std::to_string(c.beta);
  std::vector<uint16_t> a(size_t(m * k)), b(size_t(k * n)), c0(size_t(m * n));
  for (size_t i = 0; i < a.size(); ++i) a[i] = draw(seed, i, c.integers);
  for (size_t i = 0; i < b.size(); ++i) b[i] = draw(seed + 1, i, c.integers);
  // beta = 0 must not read C: NaN there would show.
  for (size_t i = 0; i < c0.size(); ++i)
    c0[i] = c.beta == 0 ? f32_to_bf16(std::numeric_limits<float>::quiet_NaN()) : draw(seed + 2, i, c.integers);
  auto A = [&](int64_t i, int64_t p) { return value(c.trans_a ? a[size_t(p * m + i)] : a[size_t(i * k + p)]); };
  auto B = [&](int64_t p, int64_t j) { return value(c.trans_b ? b[size_t(j * k + p)] : b[size_t(p * n + j)]); };

  const std::vector<uint16_t> native = run(be, cpu::Bf16Products::Auto, c, a, b, c0);
  const std::vector<uint16_t> converted = run(be, cpu::Bf16Products::Convert, c, a, b, c0);
  bool exact_ok = true, ref_ok = true, pair_ok = true;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0, magnitude = 0;
      for (int64_t p = 0; p < k; ++p) {
        dot += A(i, p) * B(p, j);
        magnitude += std::fabs(A(i, p) * B(p, j));
      }
      const size_t at = size_t(i * n + j);
      const double old = c.beta == 0 ? 0 : value(c0[at]);
      const double ref = c.alpha * dot + c.beta * old;
      const double x1 = value(native[at]), x2 = value(converted[at]);
      if (c.integers) {
        // Exact sums: both are the reference rounded once to bf16.
        const uint16_t want = f32_to_bf16(float(ref));
        exact_ok = exact_ok && native[at] == want && converted[at] == want;
        continue;
      }
      // The fp32 sums' rounding (any order), then bf16's half ulp (2^-8 of
      // the value at most) for the reference, a whole ulp between the two.
      const double sums = (std::fabs(c.alpha) * magnitude + std::fabs(c.beta * old)) * double(k + 2) * 0x1p-23;
      ref_ok = ref_ok && std::fabs(x1 - ref) <= 0x1p-8 * std::fabs(ref) + sums;
      pair_ok = pair_ok && std::fabs(x1 - x2) <= 0x1p-7 * std::max(std::fabs(x1), std::fabs(x2)) + sums;
      g_worst = std::max(g_worst, std::fabs(x1 - ref) / (std::fabs(ref) + sums));
    }
  }
  CHECK(exact_ok);
  CHECK(ref_ok);
  CHECK(pair_ok);
}

}  // namespace

int main() {
  if (!cpu::avx512_bf16_available()) {
    std::fprintf(stderr, "skipped: this CPU has no AVX-512 BF16, so bf16 products only run converted to f32\n");
    return 77;
  }
  auto backend = make_cpu_backend(2);  // two threads: panels run on the pool too
  uint64_t seed = 1;
  for (const Shape &s : kShapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool integers : {true, false})
          for (double beta : {0.0, 0.5})
            check_case(*backend, Case{s, ta, tb, integers, integers ? 1.0 : 0.75, beta}, seed += 3);
  if (kiln::test::g_failures) {
    std::fprintf(stderr, "%d check(s) failed\n", kiln::test::g_failures);
    return 1;
  }
  std::printf("cpu_bf16_gemm_test: all checks passed (worst |native - f64| / (|f64| + bound): %.3g)\n", g_worst);
  return 0;
}
