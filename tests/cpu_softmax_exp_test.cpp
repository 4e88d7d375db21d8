// exp_nonpositive (src/backend/cpu/softmax_exp.hpp), the exp the
// cross-entropy kernel's softmax runs, against double precision's exp over
// its whole domain: every 61st float of [ln(FLT_MIN), 0] (about 18 million,
// each binade of the argument sampled), every float within 64 ulps of a
// multiple of ln(2) / 2 there (where its range reduction changes n), and the
// values whose result the kernel relies on: exp(0) = 1 exactly, 0 below
// ln(FLT_MIN) and for -inf, NaN for NaN of either sign. Each sweep runs in
// every variant vectorized() picks from on this CPU (the baseline's SSE2,
// AVX2 without FMA, AVX-512 with it), since each compiles its own code.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.hpp"
#include "backend/cpu/softmax_exp.hpp"
#include "backend/cpu/vectorize.hpp"
#include "backend_harness.hpp"

using namespace kiln;
using kiln::test::g_case;

namespace {

// exp_nonpositive of every x, through vectorized() as the kernel calls it.
std::vector<float> exp_all(const std::vector<float> &x) {
  std::vector<float> y(x.size());
  const float *in = x.data();
  float *out = y.data();
  const size_t n = x.size();
  cpu::vectorized([&] {
    for (size_t i = 0; i < n; ++i) out[i] = cpu::exp_nonpositive(in[i]);
  });
  return y;
}

// |got - exp(x)| in units of the last place of the exact result (in float),
// exp(x) taken in double.
double ulps_off(float got, float x) {
  const double want = std::exp(double(x));
  int exponent;
  std::frexp(want, &exponent);
  return std::fabs(double(got) - want) / std::ldexp(1.0, exponent - 24);
}

// The largest error over xs, checking each result against the bound.
double sweep(const std::vector<float> &xs, double bound) {
  const std::vector<float> ys = exp_all(xs);
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double off = ulps_off(ys[i], xs[i]);
    if (!(off <= bound)) {
      kiln::test::expect(false, "exp_nonpositive(" + std::to_string(xs[i]) + ") = " + std::to_string(ys[i]) + ", " +
                                    std::to_string(off) + " ulps from exp");
      return off;
    }
    worst = std::max(worst, off);
  }
  return worst;
}

double check_variant() {
  const uint32_t smallest = cpu::bits_of(cpu::kSmallestNormalExpArg);
  std::vector<float> xs;
  // Negative floats: bits from -0 (0x80000000) up to ln(FLT_MIN)'s.
  for (uint32_t b = 0x80000000u; b <= smallest; b += 61) xs.push_back(cpu::float_of(b));
  xs.push_back(cpu::kSmallestNormalExpArg);
  // Around each point where round(x / ln 2) steps.
  for (int k = 1; double(k) * 0.5 * M_LN2 < 87.3; ++k) {
    const uint32_t mid = cpu::bits_of(-float(double(k) * 0.5 * M_LN2));
    for (uint32_t b = mid - 64; b <= mid + 64; ++b) xs.push_back(cpu::float_of(b));
  }
  // Well within the 2 ulps the header promises; a dropped term or a
  // misplaced constant is off by thousands.
  const double worst = sweep(xs, 2.0);

  const float nan = std::nanf("");
  const std::vector<float> special = {0.0f,   -0.0f,   -INFINITY,
                                      nan,    -nan,    std::nextafter(cpu::kSmallestNormalExpArg, -INFINITY),
                                      -88.0f, -103.0f, -1e30f};
  const std::vector<float> y = exp_all(special);
  CHECK(y[0] == 1.0f && y[1] == 1.0f);  // exactly, as the row's maximum's own term
  CHECK(y[2] == 0.0f);
  CHECK(std::isnan(y[3]) && std::isnan(y[4]));
  for (size_t i = 5; i < special.size(); ++i) CHECK(y[i] == 0.0f);  // subnormal or less: flushed
  return worst;
}

}  // namespace

int main() {
  std::vector<std::pair<const char *, cpu::LoopVectors>> variants = {{"baseline", cpu::LoopVectors::Baseline}};
  if (cpu::avx2_fma_available()) variants.push_back({"avx2", cpu::LoopVectors::Avx2});
  if (cpu::avx512_available()) variants.push_back({"avx512", cpu::LoopVectors::Auto});
  for (const auto &[name, which] : variants) {
    g_case = name;
    cpu::set_loop_vectors(which);
    const double worst = check_variant();
    std::printf("%s: within %.3f ulps of exp\n", name, worst);
  }
  cpu::set_loop_vectors(cpu::LoopVectors::Auto);
  return kiln::test::finish("cpu_softmax_exp_test");
}
