// exp(x) for x <= 0 in float without a call into libm, for the softmax of
// the cross-entropy kernel (a logit less its row's maximum is <= 0).
//
// Why not std::exp: glibc's expf is a call the vectoriser cannot see into,
// one element at a time; on the tutorial step (128 rows of 10 logits) it
// made cross_entropy about 4% of the whole step. Written as arithmetic and
// bit masks only, a loop of calls runs 4, 8 or 16 lanes at once under
// vectorized() (vectorize.hpp).
//
// How: exp(x) = 2^n exp(r) with n = round(x / ln 2) and |r| <= ln 2 / 2;
// exp(r) is its Taylor series to r^7, whose first omitted term is below
// 5.2e-9 of the result on that interval (a float's half ulp is 6e-8), and
// 2^n is built from its exponent bits. Within 2 ulps of the correctly
// rounded exp over [-87.3, 0] (tests/cpu_softmax_exp_test.cpp sweeps it
// against double precision); exp(0) is exactly 1, so a row's largest logit
// contributes exactly 1 as it does with libm's exp.
#pragma once

#include <cstdint>
#include <cstring>

namespace kiln::cpu {

// The largest x whose exp is a subnormal float: ln(FLT_MIN). Below it the
// result is 0, as the training kernels flush subnormals (flush_denormals.hpp).
constexpr float kSmallestNormalExpArg = -87.33654475f;

// A float's bits and back (memcpy: no aliasing rules broken).
inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// exp(x) for x <= 0 (larger x is outside its domain): 0 below
// kSmallestNormalExpArg and for -inf, NaN for NaN.
inline float exp_nonpositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  // ln 2 split in two: kLn2High has 15 significant bits, so n * kLn2High is
  // exact for |n| <= 127 and x - n * kLn2High loses nothing.
  constexpr float kLn2High = 0.693145751953125f, kLn2Low = 1.42860682030941723e-6f;
  // Adding 1.5 * 2^23 rounds a float of magnitude < 2^22 to an integer and
  // leaves that integer in the low bits of the sum's significand.
  constexpr float kRoundingShift = 12582912.0f;
  constexpr uint32_t kMinusInfinityBits = 0xff800000u;
  // Below the smallest argument, told apart and clamped by the bits, with
  // masks rather than selects: GCC keeps a float compare (which may raise
  // FE_INVALID on NaN) or a select feeding float arithmetic a branch, and a
  // loop with a branch is not vectorized without AVX-512's masks. Negative
  // floats order as their bits do, up to -inf's; NaNs stay NaN, negative
  // ones (x86's) lying above -inf's bits and positive ones below -0's.
  const uint32_t x_bits = bits_of(x), smallest_bits = bits_of(kSmallestNormalExpArg);
  const uint32_t below = 0u - uint32_t(x_bits > smallest_bits && x_bits <= kMinusInfinityBits);  // all ones or 0
  const float v = float_of((x_bits & ~below) | (smallest_bits & below));
  const float shifted = v * kLog2e + kRoundingShift;
  const float n = shifted - kRoundingShift;
  const float r = (v - n * kLn2High) - n * kLn2Low;
  const float p =
      1.0f +
      r * (1.0f +
           r * (1.0f / 2 + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
  // n in [-126, 0] here, so 2^n is a normal float: exponent field n + 127.
  const float scale = float_of((bits_of(shifted) - bits_of(kRoundingShift) + 127u) << 23);
  return float_of(bits_of(p * scale) & ~below);
}

}  // namespace kiln::cpu
