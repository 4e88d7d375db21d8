// The AVX-512 BF16 matrix kernel; see bf16_gemm_avx512.hpp. Only the
// kernel is compiled for AVX-512 BF16 (per function), and it only runs
// after avx512_bf16_available() said yes, so libkiln still loads and runs
// on any x86-64.
#include "backend/cpu/bf16_gemm_avx512.hpp"

#include <algorithm>

#include "core/dtype.hpp"

#if defined(__x86_64__)
// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_ps, GCC bug
// 105593) when intrinsics are used under a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif

namespace kiln::cpu {

void bf16_pack_b(const uint16_t *b, bool trans_b, int64_t n, int64_t k, uint32_t *out) {
  constexpr int64_t NR = kBf16BlockCols;
  const int64_t pairs = (k + 1) / 2;
  auto at = [&](int64_t p, int64_t j) -> uint32_t {
    if (p >= k || j >= n) return 0;
    return trans_b ? b[j * k + p] : b[p * n + j];
  };
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    uint32_t *block = out + (j0 / NR) * bf16_packed_block(k);
    for (int64_t q = 0; q < pairs; ++q)
      for (int64_t j = 0; j < NR; ++j) block[q * NR + j] = at(2 * q, j0 + j) | at(2 * q + 1, j0 + j) << 16;
  }
}

#if defined(__x86_64__)

#define KILN_AVX512_BF16 __attribute__((target("avx512f,avx512bf16")))

namespace {

constexpr int64_t MR = 8;  // rows of C per block

// One pair (p, p + 1) of k for MR rows of A against two 16-word rows of
// packed B. A's pair is one word, low half first as packed B's; its high
// half is 0 past k (the last pair of an odd k), never read there.
template <bool kLastOfOdd>
KILN_AVX512_BF16 __attribute__((always_inline)) inline void pair_step(__m512 (&acc0)[MR], __m512 (&acc1)[MR],
                                                                      const uint16_t *const (&ar)[MR], int64_t p,
                                                                      int64_t a_col, const uint32_t *bq) {
  const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bq), b1 = (__m512bh)_mm512_loadu_si512(bq + 16);
#pragma GCC unroll 8
  for (int64_t r = 0; r < MR; ++r) {
    const uint32_t lo = ar[r][p * a_col], hi = kLastOfOdd ? 0u : ar[r][(p + 1) * a_col];
    const __m512bh av = (__m512bh)_mm512_set1_epi32(int(lo | hi << 16));
    acc0[r] = _mm512_dpbf16_ps(acc0[r], av, b0);
    acc1[r] = _mm512_dpbf16_ps(acc1[r], av, b1);
  }
}

}  // namespace

// 8 x 32 blocks of C: per pair of k, two 16-word rows of packed B times
// eight broadcast pairs of A into 16 accumulators, as the f32 kernel
// (sgemm_avx512.cpp). Rows past m re-read row m - 1 (valid memory) and are
// not stored; packed columns past n are zero and not stored.
KILN_AVX512_BF16 void bf16_gemm_avx512_rows(int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a,
                                            int64_t a_row, int64_t a_col, const uint32_t *b, float beta, uint16_t *c,
                                            int64_t ldc) {
  constexpr int64_t NR = kBf16BlockCols;
  const int64_t full_pairs = k / 2, block = bf16_packed_block(k);
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    const int64_t cols = std::min(NR, n - j0);
    const uint32_t *bb = b + (j0 / NR) * block;
    for (int64_t i0 = 0; i0 < m; i0 += MR) {
      const int64_t rows = std::min(MR, m - i0);
      const uint16_t *ar[MR];
      for (int64_t r = 0; r < MR; ++r) ar[r] = a + std::min(i0 + r, m - 1) * a_row;
      __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 8
      for (int64_t r = 0; r < MR; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
      for (int64_t q = 0; q < full_pairs; ++q) pair_step<false>(acc0, acc1, ar, 2 * q, a_col, bb + q * NR);
      if (k % 2) pair_step<true>(acc0, acc1, ar, 2 * full_pairs, a_col, bb + full_pairs * NR);
      // The conversion path's epilogue, element by element: alpha * sum
      // (+ beta * C) in f32, rounded to bf16 once.
      alignas(64) float sums[NR];
#pragma GCC unroll 8
      for (int64_t r = 0; r < MR; ++r) {
        if (r >= rows) break;
        _mm512_store_ps(sums, acc0[r]);
        _mm512_store_ps(sums + 16, acc1[r]);
        uint16_t *cr = c + (i0 + r) * ldc + j0;
        for (int64_t j = 0; j < cols; ++j) {
          float v = alpha * sums[j];
          if (beta != 0) v += beta * bf16_to_f32(cr[j]);
          cr[j] = f32_to_bf16(v);
        }
      }
    }
  }
}

#else  // not x86-64: bf16 products go through the f32 conversion

void bf16_gemm_avx512_rows(int64_t, int64_t, int64_t, float, const uint16_t *, int64_t, int64_t, const uint32_t *,
                           float, uint16_t *, int64_t) {}

#endif

}  // namespace kiln::cpu
