// AVX-512 register-blocked sgemm kernels; see sgemm_avx512.hpp. Only this
// file is compiled for AVX-512 (per function), and only runs after
// avx512_available() said yes, so libkiln still loads on any x86-64.
#include "backend/cpu/sgemm_avx512.hpp"

#include <algorithm>

#if defined(__x86_64__)
// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_ps, GCC bug
// 105593) when intrinsics are used under a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif

namespace kiln::cpu {

#if defined(__x86_64__)

bool avx512_available() {
  static const bool available = [] {
    __builtin_cpu_init();  // harmless if done, needed if we run before libgcc's constructor
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }();
  return available;
}

#define KILN_AVX512 __attribute__((target("avx512f")))

namespace {

// Lanes [0, count) of a 16-lane mask, count clamped to [0, 16].
KILN_AVX512 inline __mmask16 lanes(int64_t count) {
  return count >= 16 ? __mmask16(0xffff) : count <= 0 ? __mmask16(0) : __mmask16((1u << count) - 1);
}

}  // namespace

// 8 x 32 blocks of C: per step of k, two 16-wide rows of B times eight
// broadcast elements of A into 16 accumulators. Rows past m re-read row
// m - 1 (valid memory) and are not stored; columns past n are masked.
KILN_AVX512 void sgemm_avx512_rows(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t a_row,
                                   int64_t a_col, const float *b, int64_t ldb, int64_t b_block, float beta, float *c,
                                   int64_t ldc) {
  constexpr int64_t MR = 8, NR = kSgemmBlockCols;
  const __m512 alpha_v = _mm512_set1_ps(alpha), beta_v = _mm512_set1_ps(beta);
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    const __mmask16 mask0 = lanes(n - j0), mask1 = lanes(n - j0 - 16);
    for (int64_t i0 = 0; i0 < m; i0 += MR) {
      const int64_t rows = std::min(MR, m - i0);
      int64_t row_offset[MR];
      for (int64_t r = 0; r < MR; ++r) row_offset[r] = std::min(i0 + r, m - 1) * a_row;
      __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 8
      for (int64_t r = 0; r < MR; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
      const float *bp = b + (j0 / NR) * b_block;
      const float *ap = a;
      for (int64_t p = 0; p < k; ++p, bp += ldb, ap += a_col) {
        const __m512 b0 = _mm512_maskz_loadu_ps(mask0, bp), b1 = _mm512_maskz_loadu_ps(mask1, bp + 16);
#pragma GCC unroll 8
        for (int64_t r = 0; r < MR; ++r) {
          const __m512 av = _mm512_set1_ps(ap[row_offset[r]]);
          acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
          acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
        }
      }
      // Constant indices only (unrolled, guarded), so the accumulators stay
      // in registers instead of being spilled to an addressable array.
#pragma GCC unroll 8
      for (int64_t r = 0; r < MR; ++r) {
        if (r >= rows) break;
        float *cr = c + (i0 + r) * ldc + j0;
        __m512 v0 = _mm512_mul_ps(acc0[r], alpha_v), v1 = _mm512_mul_ps(acc1[r], alpha_v);
        if (beta != 0) {
          v0 = _mm512_fmadd_ps(beta_v, _mm512_maskz_loadu_ps(mask0, cr), v0);
          v1 = _mm512_fmadd_ps(beta_v, _mm512_maskz_loadu_ps(mask1, cr + 16), v1);
        }
        _mm512_mask_storeu_ps(cr, mask0, v0);
        _mm512_mask_storeu_ps(cr + 16, mask1, v1);
      }
    }
  }
}

// Unpacks, then 128-bit lane shuffles: the classic in-register transpose.
KILN_AVX512 void sgemm_avx512_transpose_tile(const float *src, int64_t lds, float *dst, int64_t ldd) {
  __m512 r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) {
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
#pragma GCC unroll 2
  for (int h = 0; h < 16; h += 8) {
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xdd);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * ldd, r[i]);
}


KILN_AVX512 void sgemm_avx512_pack_transposed(const float *bt, int64_t n, int64_t k, float *out) {
  constexpr int64_t NR = kSgemmBlockCols;
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    const int64_t w = std::min(NR, n - j0);
    float *block = out + (j0 / NR) * NR * k;
    int64_t p0 = 0;
    for (; p0 + 16 <= k; p0 += 16) {
      int64_t j = 0;
      for (; j + 16 <= w; j += 16) sgemm_avx512_transpose_tile(bt + (j0 + j) * k + p0, k, block + p0 * NR + j, NR);
      for (; j < w; ++j) {  // columns of a partial last block
        const float *row = bt + (j0 + j) * k;
        for (int64_t p = p0; p < p0 + 16; ++p) block[p * NR + j] = row[p];
      }
    }
    for (int64_t j = 0; j < w; ++j) {  // the last k % 16 rows of op(B)
      const float *row = bt + (j0 + j) * k;
      for (int64_t p = p0; p < k; ++p) block[p * NR + j] = row[p];
    }
  }
}

#else  // not x86-64: the BLAS does all products

bool avx512_available() { return false; }
void sgemm_avx512_rows(int64_t, int64_t, int64_t, float, const float *, int64_t, int64_t, const float *, int64_t,
                       int64_t, float, float *, int64_t) {}
void sgemm_avx512_pack_transposed(const float *, int64_t, int64_t, float *) {}
void sgemm_avx512_transpose_tile(const float *, int64_t, float *, int64_t) {}

#endif

}  // namespace kiln::cpu
