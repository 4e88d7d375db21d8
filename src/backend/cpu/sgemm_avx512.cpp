// AVX-512 register-blocked sgemm kernels; see sgemm_avx512.hpp. Only this
// file is compiled for AVX-512 (per function), and only runs after
// avx512_available() said yes, so libkiln still loads on any x86-64.
#include "backend/cpu/sgemm_avx512.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include "backend/cpu/aligned_buffer.hpp"
#include "backend/cpu/blocking.hpp"

#if defined(__x86_64__)
// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_ps, GCC bug
// 105593) when intrinsics are used under a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif

namespace kiln::cpu {

#if defined(__x86_64__)

#define KILN_AVX512 __attribute__((target("avx512f")))

namespace {

// Lanes [0, count) of a 16-lane mask, count clamped to [0, 16].
KILN_AVX512 inline __mmask16 lanes(int64_t count) {
  return count >= 16 ? __mmask16(0xffff) : count <= 0 ? __mmask16(0) : __mmask16((1u << count) - 1);
}

// One block of C: rows [i0, i0 + MR) by V vectors of 16 columns, over all
// of k. Per step of k, V vectors of B times MR broadcast elements of A into
// MR V accumulators. Rows past m re-read row m - 1 (valid memory) and are
// not stored; columns past the masks are not touched. Inlined: with a short
// k (a layer of 10 outputs) a call per block costs more than its FMAs. A
// Full block has all V vectors of columns and loads B unmasked: with the
// masks, kept in the stack and reloaded every step, the tutorial's X W1^T
// (128 x 32 x 784) took 66 us on one Zen 4 core (83% of its peak), without
// them 57 (96%).
template <int V, int64_t MR, bool Full>
KILN_AVX512 inline __attribute__((always_inline)) void rows_block(int64_t m, int64_t i0, int64_t k, const float *a,
                                                                  int64_t a_row, int64_t a_col, const float *bp,
                                                                  int64_t ldb, __mmask16 mask0, __mmask16 mask1,
                                                                  float alpha, float beta, float *c, int64_t ldc) {
  const __mmask16 mask[2] = {mask0, mask1};
  const int64_t rows = std::min(MR, m - i0);
  int64_t row_offset[MR];
  for (int64_t r = 0; r < MR; ++r) row_offset[r] = std::min(i0 + r, m - 1) * a_row;
  __m512 acc[MR][V];
#pragma GCC unroll 12
  for (int64_t r = 0; r < MR; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < k; ++p, bp += ldb, a += a_col) {
    __m512 bv[V];
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v)
      bv[v] = Full ? _mm512_loadu_ps(bp + 16 * v) : _mm512_maskz_loadu_ps(mask[v], bp + 16 * v);
#pragma GCC unroll 12
    for (int64_t r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[row_offset[r]]);
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  const __m512 alpha_v = _mm512_set1_ps(alpha), beta_v = _mm512_set1_ps(beta);
  // Constant indices only (unrolled, guarded), so the accumulators stay
  // in registers instead of being spilled to an addressable array.
#pragma GCC unroll 12
  for (int64_t r = 0; r < MR; ++r) {
    if (r >= rows) break;
    float *cr = c + (i0 + r) * ldc;
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) {
      __m512 out = _mm512_mul_ps(acc[r][v], alpha_v);
      if (beta != 0) out = _mm512_fmadd_ps(beta_v, _mm512_maskz_loadu_ps(mask[v], cr + 16 * v), out);
      _mm512_mask_storeu_ps(cr + 16 * v, mask[v], out);
    }
  }
}

}  // namespace

// 8 x 32 blocks of C, or 12 x 32 for 9 to 12 rows (x 16 where at most 16
// columns are left: the last layer of a classifier has 10, and a second
// vector would be all masked).
KILN_AVX512 void sgemm_avx512_rows(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t a_row,
                                   int64_t a_col, const float *b, int64_t ldb, int64_t b_block, float beta, float *c,
                                   int64_t ldc) {
  constexpr int64_t NR = kSgemmBlockCols;
  // 9 to 12 rows (the weight gradient of a 10-class output layer) are one
  // block of 12: two blocks of 8 would compute 16 rows.
  const bool twelve = m > 8 && m <= 12;
  const int64_t MR = twelve ? 12 : 8;
  auto block = [&](int64_t i0, int64_t j0) KILN_AVX512 {
    const __mmask16 mask0 = lanes(n - j0), mask1 = lanes(n - j0 - 16);
    const float *bp = b + (j0 / NR) * b_block;
    float *cb = c + j0;
    const bool full = n - j0 >= NR;
    if (twelve && n - j0 <= 16) {
      rows_block<1, 12, false>(m, i0, k, a, a_row, a_col, bp, ldb, mask0, mask1, alpha, beta, cb, ldc);
    } else if (twelve && full) {
      rows_block<2, 12, true>(m, i0, k, a, a_row, a_col, bp, ldb, mask0, mask1, alpha, beta, cb, ldc);
    } else if (twelve) {
      rows_block<2, 12, false>(m, i0, k, a, a_row, a_col, bp, ldb, mask0, mask1, alpha, beta, cb, ldc);
    } else if (n - j0 <= 16) {
      rows_block<1, 8, false>(m, i0, k, a, a_row, a_col, bp, ldb, mask0, mask1, alpha, beta, cb, ldc);
    } else if (full) {
      rows_block<2, 8, true>(m, i0, k, a, a_row, a_col, bp, ldb, mask0, mask1, alpha, beta, cb, ldc);
    } else {
      rows_block<2, 8, false>(m, i0, k, a, a_row, a_col, bp, ldb, mask0, mask1, alpha, beta, cb, ldc);
    }
  };
  // With a few steps of k the product is bound by writing C: its rows are
  // then written whole, one block of rows after the other, while all of B
  // (k x n floats) stays in the L1. Column by column, the 8-row blocks went
  // down C 4 KiB apart (1024 columns) and each row's lines were fetched
  // 32 times: dY W of the 784-1024-1024-10 step's output layer (k = 10)
  // took 130 to 300 us; row by row, 75 to 85.
  if (k <= kSgemmShortDepth) {
    for (int64_t i0 = 0; i0 < m; i0 += MR)
      for (int64_t j0 = 0; j0 < n; j0 += NR) block(i0, j0);
    return;
  }
  // Otherwise one block of B's columns (k x 32 floats) stays in the cache
  // while every block of rows uses it.
  for (int64_t j0 = 0; j0 < n; j0 += NR)
    for (int64_t i0 = 0; i0 < m; i0 += MR) block(i0, j0);
}

namespace {

// The dot products go over k in passes of kDotsDepth steps, kDotsRows rows
// of A at a time: a pass's slice of B (12 x 256 floats at most, 12 KiB)
// stays in the L1 while the rows use it. Over all of k at once, B's 10 rows
// of a classifier (40 KiB for 1024 inputs) came from the L2 for every two
// rows of A: 256 x 10 x 1024 took 67-74 us instead of 50-56.
constexpr int64_t kDotsDepth = 256;
constexpr int64_t kDotsRows = 16;

// acc[r][j] += the 16-lane partial sums of A(r, :) . B(j, :) over kc steps,
// for R rows of A and the N rows of B, each vector of B shared by the R rows.
template <int64_t R, int N>
KILN_AVX512 void dots_pass(int64_t kc, const float *a, int64_t lda, const float *b, int64_t ldb, __m512 (*acc)[N]) {
  __m512 sum[R][N];
#pragma GCC unroll 2
  for (int64_t r = 0; r < R; ++r) {
#pragma GCC unroll 12
    for (int j = 0; j < N; ++j) sum[r][j] = acc[r][j];
  }
  for (int64_t p = 0; p < kc; p += 16) {
    const __mmask16 mask = lanes(kc - p);
    __m512 av[R];
#pragma GCC unroll 2
    for (int64_t r = 0; r < R; ++r) av[r] = _mm512_maskz_loadu_ps(mask, a + r * lda + p);
#pragma GCC unroll 12
    for (int j = 0; j < N; ++j) {
      const __m512 bv = _mm512_maskz_loadu_ps(mask, b + j * ldb + p);
#pragma GCC unroll 2
      for (int64_t r = 0; r < R; ++r) sum[r][j] = _mm512_fmadd_ps(av[r], bv, sum[r][j]);
    }
  }
#pragma GCC unroll 2
  for (int64_t r = 0; r < R; ++r) {
#pragma GCC unroll 12
    for (int j = 0; j < N; ++j) acc[r][j] = sum[r][j];
  }
}

// sgemm_avx512_dots for N columns: kDotsRows rows of C at a time, their
// partial sums kept as vectors over the passes, then summed across lanes.
template <int N>
KILN_AVX512 void dots(int64_t m, int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float beta, float *c, int64_t ldc) {
  __m512 acc[kDotsRows][N];
  for (int64_t i0 = 0; i0 < m; i0 += kDotsRows) {
    const int64_t rows = std::min(kDotsRows, m - i0);
    for (int64_t r = 0; r < rows; ++r)
      for (int j = 0; j < N; ++j) acc[r][j] = _mm512_setzero_ps();
    for (int64_t p0 = 0; p0 < k; p0 += kDotsDepth) {
      const int64_t kc = std::min(kDotsDepth, k - p0);
      const float *ap = a + i0 * lda + p0;
      int64_t r = 0;
      for (; r + 2 <= rows; r += 2) dots_pass<2, N>(kc, ap + r * lda, lda, b + p0, ldb, acc + r);
      if (r < rows) dots_pass<1, N>(kc, ap + r * lda, lda, b + p0, ldb, acc + r);
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int j = 0; j < N; ++j) {
        float &out = c[(i0 + r) * ldc + j];
        const float dot = alpha * _mm512_reduce_add_ps(acc[r][j]);
        out = beta == 0 ? dot : dot + beta * out;  // beta = 0 never reads C
      }
    }
  }
}

using Dots = void (*)(int64_t, int64_t, float, const float *, int64_t, const float *, int64_t, float, float *,
                      int64_t);

// dots<n> for n = 1 .. sizeof...(I), at index n - 1.
template <int... I>
constexpr std::array<Dots, sizeof...(I)> dots_by_width(std::integer_sequence<int, I...>) {
  return {&dots<I + 1>...};
}

}  // namespace

void sgemm_avx512_dots(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                       int64_t ldb, float beta, float *c, int64_t ldc) {
  static constexpr std::array<Dots, kSgemmDotsMaxCols> by_width =
      dots_by_width(std::make_integer_sequence<int, kSgemmDotsMaxCols>());
  if (n < 1 || n > kSgemmDotsMaxCols)
    fail(KILN_ERROR_INTERNAL, "sgemm_avx512_dots takes 1 to kSgemmDotsMaxCols columns");
  by_width[size_t(n - 1)](m, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

namespace {

// r[i] (row i of a 16 x 16 tile) becomes column i: unpacks, then 128-bit
// lane shuffles, the classic in-register transpose.
KILN_AVX512 inline __attribute__((always_inline)) void transpose_in_registers(__m512 (&r)[16]) {
  __m512 t[16];
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
}

}  // namespace

KILN_AVX512 void sgemm_avx512_transpose_tile(const float *src, int64_t lds, float *dst, int64_t ldd) {
  __m512 r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
  transpose_in_registers(r);
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * ldd, r[i]);
}

KILN_AVX512 void sgemm_avx512_pack_b(const float *b, int64_t ldb, bool trans_b, int64_t n, int64_t k, float *out) {
  constexpr int64_t NR = kSgemmBlockCols;
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    const int64_t w = std::min(NR, n - j0);
    float *block = out + (j0 / NR) * NR * k;
    if (!trans_b) {  // row by row, two vectors (std::copy called memmove for each 128 bytes)
      const __mmask16 mask0 = lanes(w), mask1 = lanes(w - 16);
      for (int64_t p = 0; p < k; ++p) {
        const float *row = b + p * ldb + j0;
        _mm512_mask_storeu_ps(block + p * NR, mask0, _mm512_maskz_loadu_ps(mask0, row));
        _mm512_mask_storeu_ps(block + p * NR + 16, mask1, _mm512_maskz_loadu_ps(mask1, row + 16));
      }
      continue;
    }
    int64_t p0 = 0;
    for (; p0 + 16 <= k; p0 += 16) {
      int64_t j = 0;
      for (; j + 16 <= w; j += 16) sgemm_avx512_transpose_tile(b + (j0 + j) * ldb + p0, ldb, block + p0 * NR + j, NR);
      for (; j < w; ++j) {  // columns of a partial last block
        const float *row = b + (j0 + j) * ldb;
        for (int64_t p = p0; p < p0 + 16; ++p) block[p * NR + j] = row[p];
      }
    }
    for (int64_t j = 0; j < w; ++j) {  // the last k % 16 rows of op(B)
      const float *row = b + (j0 + j) * ldb;
      for (int64_t p = p0; p < k; ++p) block[p * NR + j] = row[p];
    }
  }
}

namespace {

// The blocked product's tile: kBlockedTileRows rows of C by one 32-column
// block. 24 accumulators (of the 32 registers) make 24 FMAs per two loads of
// B and twelve broadcasts of A, enough to keep both FMA ports busy where the
// 8-row kernel above waits on its loads.
constexpr int64_t kTileRows = kSgemmTileRows;
// Most steps of k in one pass. One pass over the whole of k writes C once;
// with passes of 256 steps (a [256, 32] block of B, 32 KiB, kept in the L1)
// each later pass read C back and wrote it again, from and to the L3. In
// one pass the block of B (up to 128 KiB) streams from the L2 instead:
// 256 x 1024 x 784 went 5% faster, 256 x 1024 x 1024 1 to 1.5% (one Zen 5
// core, alternating calls).
constexpr int64_t kMaxDepth = 1024, kMinDepth = 256;
// Floats of A packed at once, 1 MiB: 86 panels of 256 steps (a weight
// gradient's 1024 rows in one row block: each row block packs all of op(B)
// once more, and with 384-row blocks the batch's activations were packed 3
// times), or 22 panels of 992 steps: a batch of 256 takes 784 steps of k in
// one pass, and 1024 in two of 512. One pass of 1024 there (22 panels of
// 1024 steps, 1.03 MiB) was 0 to 2% slower on 256 x 1024 x 1024, on one
// thread and two (alternating runs, 2026-11-27).
constexpr int64_t kPackedA = 86 * kTileRows * 256;

// Steps of k ahead that the panel of A is prefetched.
constexpr int64_t kPrefetchSteps = 16;
// Most steps of k between two of a tile's prefetches (LinesAhead).
constexpr int64_t kStepsPerLine = 8;

// One step of k of full_tile: the R x 32 accumulators += A's R values of
// the step times B's 32.
template <int64_t R>
KILN_AVX512 __attribute__((always_inline)) inline void tile_step(const float *a, const float *b, __m512 (&acc0)[R],
                                                                 __m512 (&acc1)[R]) {
  // The panel of A streams in from the L2, 48 bytes per step.
  _mm_prefetch(reinterpret_cast<const char *>(a + kPrefetchSteps * kTileRows), _MM_HINT_T0);
  const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
  for (int64_t r = 0; r < R; ++r) {
    const __m512 av = _mm512_set1_ps(a[r]);
    acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
    acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
  }
}

// Prefetches line `line` of a tile's C: row line / 2, columns 0-15 or 16-31.
inline void c_line_prefetch(const float *c, int64_t ldc, int64_t line) {
  _mm_prefetch(reinterpret_cast<const char *>(c + (line / 2) * ldc + (line % 2) * 16), _MM_HINT_T0);
}

// C[R, 32] = alpha * A B + beta * C over kc steps, A R rows of a packed
// [kc, 12] panel, B a packed [kc, 32] block, asking for `ahead` on the
// way. R = 12 is the tile; 8 and 4 finish a panel's last rows at full
// speed (a batch of 256 leaves 4).
template <int64_t R>
KILN_AVX512 void full_tile(int64_t kc, const float *a, const float *b, float alpha, float beta, float *c, int64_t ldc,
                           const LinesAhead &ahead) {
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 12
  for (int64_t r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  // C's 2R lines are far apart (in the L3 or beyond) and the epilogue needs
  // them: they are asked for one at a time over the first steps. Asked for
  // all at once, they filled the L1's miss buffers and the loads of A and
  // of the packing waited behind them; spread, the products of a
  // 784-1024-1024-10 step run 3-6% faster (alternating runs). The lines
  // ahead follow at the same pace, as many as the steps leave room for.
  const int64_t c_lines = 2 * R, lines = c_lines + ahead.count;
  const int64_t every = std::clamp<int64_t>(kc / lines, 1, kStepsPerLine);
  int64_t p = 0, line = 0;
  for (; kc < c_lines && line < c_lines; ++line) c_line_prefetch(c, ldc, line);  // a pass too short to spread over
  for (; line < lines && p + every <= kc; ++line) {
    if (line < c_lines) c_line_prefetch(c, ldc, line);
    else ahead.prefetch(line - c_lines);
    for (int64_t s = 0; s < every; ++s, ++p) tile_step<R>(a + p * kTileRows, b + p * kSgemmBlockCols, acc0, acc1);
  }
  for (; p < kc; ++p) tile_step<R>(a + p * kTileRows, b + p * kSgemmBlockCols, acc0, acc1);
  const __m512 alpha_v = _mm512_set1_ps(alpha), beta_v = _mm512_set1_ps(beta);
#pragma GCC unroll 12
  for (int64_t r = 0; r < R; ++r) {
    float *cr = c + r * ldc;
    __m512 v0 = _mm512_mul_ps(acc0[r], alpha_v), v1 = _mm512_mul_ps(acc1[r], alpha_v);
    if (beta != 0) {
      v0 = _mm512_fmadd_ps(beta_v, _mm512_loadu_ps(cr), v0);
      v1 = _mm512_fmadd_ps(beta_v, _mm512_loadu_ps(cr + 16), v1);
    }
    _mm512_storeu_ps(cr, v0);
    _mm512_storeu_ps(cr + 16, v1);
  }
}

// C[rows, w] = alpha * A B + beta * C for one packed panel of A (rows <= 12)
// and one packed block of B (w <= 32): whole tiles where the block is
// full, the first of them asking for `ahead`, the masked kernel for what
// is left.
void panel_tile(int64_t rows, int64_t w, int64_t kc, const float *a, const float *b, float alpha, float beta, float *c,
                int64_t ldc, const LinesAhead &ahead) {
  int64_t r = 0;
  if (w == kSgemmBlockCols) {
    if (rows == kTileRows) return full_tile<kTileRows>(kc, a, b, alpha, beta, c, ldc, ahead);
    const LinesAhead none;
    for (; r + 8 <= rows; r += 8) full_tile<8>(kc, a + r, b, alpha, beta, c + r * ldc, ldc, r == 0 ? ahead : none);
    for (; r + 4 <= rows; r += 4) full_tile<4>(kc, a + r, b, alpha, beta, c + r * ldc, ldc, r == 0 ? ahead : none);
  }
  if (r < rows) {
    sgemm_avx512_rows(rows - r, w, kc, alpha, a + r, 1, kTileRows, b, kSgemmBlockCols, kSgemmBlockCols * kc, beta,
                      c + r * ldc, ldc);
  }
}

// out[p * 12 + r] = A(r, p) for the rows < 12 rows and kc columns of a
// row-major A, A(r, p) = a[r * lda + p]: 16 x 16 transposes in registers,
// the rows past `rows` zeros (never read from A), each column stored as a
// step's 12 values.
KILN_AVX512 void pack_rows(const float *a, int64_t lda, int64_t rows, int64_t kc, float *out) {
  const __mmask16 tile_lanes = __mmask16((1u << kTileRows) - 1);
  __m512 r[16];
  int64_t p0 = 0;
  for (; p0 + 16 <= kc; p0 += 16) {
#pragma GCC unroll 16
    for (int64_t q = 0; q < 16; ++q) r[q] = q < rows ? _mm512_loadu_ps(a + q * lda + p0) : _mm512_setzero_ps();
    transpose_in_registers(r);
#pragma GCC unroll 16
    for (int64_t q = 0; q < 16; ++q) _mm512_mask_storeu_ps(out + (p0 + q) * kTileRows, tile_lanes, r[q]);
  }
  for (int64_t p = p0; p < kc; ++p) {
    for (int64_t i = 0; i < rows; ++i) out[p * kTileRows + i] = a[i * lda + p];
  }
}

// Rows of a transposed A packed together, step by step: four panels, whose
// 48 values of a step are three whole cache lines of a row of the stored
// matrix.
constexpr int64_t kPackGroupRows = 4 * kTileRows;

// The panels of rows [0, rows) of A over kc steps of k, panel i / 12 at
// out + i * kc: out[i * kc + p * 12 + r] = A(i + r, p), zeros past the last
// row. A(i, p) = a[i * a_row + p * a_col], with a_col = 1 (row-major) or
// a_row = 1 (stored transposed: a weight gradient's dY^T).
//
// A transposed A is not read in place by the tiles: its steps of k are a
// row of the stored matrix apart, often a multiple of 4 KiB, and a panel's
// lines then evict each other from the L1. Its panels are packed
// kPackGroupRows rows at a time, step by step. One panel at a time, each
// step read 12 values, parts of one or two lines, and the next panel read
// those lines again, likely evicted by then (a 4 KiB stride maps them all
// to one L1 set): the two weight-gradient products of a 784-1024-1024-10
// step at batch 256 took 1-4% longer in 9 of 10 alternating pairs of runs
// (one thread, either one first; 2026-11-27); B's epochs are within noise
// of it (the groups won 9 of 9 pairs on one and two threads when run
// second, 4 of 6 when run first). All panels at once (one pass down the
// steps) was 6% slower than one at a time: its stores went to 86 panels
// 12 KiB apart.
KILN_AVX512 void pack_panels(const float *a, int64_t a_row, int64_t a_col, int64_t rows, int64_t kc, float *out) {
  if (a_row != 1) {
    for (int64_t i = 0; i < rows; i += kTileRows)
      pack_rows(a + i * a_row, a_row, std::min(kTileRows, rows - i), kc, out + i * kc);
    return;
  }
  const __mmask16 tile_lanes = __mmask16((1u << kTileRows) - 1);
  const int64_t whole = rows / kTileRows * kTileRows;  // rows in whole panels
  const __mmask16 last_lanes = lanes(rows - whole);
  for (int64_t g0 = 0; g0 < rows; g0 += kPackGroupRows) {
    const int64_t g1 = std::min(rows, g0 + kPackGroupRows), whole_end = std::min(whole, g1);
    for (int64_t p = 0; p < kc; ++p) {
      const float *step = a + p * a_col;
      float *to = out + p * kTileRows;
      int64_t i = g0;
      for (; i < whole_end; i += kTileRows) {
        _mm512_mask_storeu_ps(to + i * kc, tile_lanes, _mm512_maskz_loadu_ps(tile_lanes, step + i));
      }
      if (i < g1) _mm512_mask_storeu_ps(to + i * kc, tile_lanes, _mm512_maskz_loadu_ps(last_lanes, step + i));
    }
  }
}

}  // namespace

void sgemm_avx512_blocked(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t a_row, int64_t a_col,
                          const float *b, int64_t ldb, bool trans_b, float beta, float *c, int64_t ldc) {
  constexpr int64_t NR = kSgemmBlockCols;
  // One pair per thread, allocated by its first product, then reused.
  thread_local AlignedBuffer<float> a_buffer, b_buffer;
  // As deep as the row block of all of m (at least 256 steps) allows, in
  // passes of equal depth, whole 16 x 16 transposes: so a batch of 1024
  // keeps 256-step passes over one row block, where four row blocks of 1024
  // steps would pack all of op(B) four times (1% slower).
  const int64_t all_rows = (m + kTileRows - 1) / kTileRows * kTileRows;
  const int64_t deepest = std::clamp<int64_t>(kPackedA / all_rows / 16 * 16, kMinDepth, kMaxDepth);
  const int64_t depth = even_part(k, deepest, 16);
  const int64_t most_rows = (kPackedA / depth + kTileRows - 1) / kTileRows * kTileRows;
  const int64_t row_block = even_part(m, most_rows, kTileRows);
  float *const a_packed = a_buffer.reserve(row_block * depth, "for a packed matrix operand");
  float *const b_block = b_buffer.reserve(depth * NR, "for a packed matrix operand");
  for (int64_t p0 = 0; p0 < k; p0 += depth) {
    const int64_t kc = std::min(depth, k - p0);
    // Later passes over k add to what the first one stored.
    const float pass_beta = p0 == 0 ? beta : 1.0f;
    for (int64_t i1 = 0; i1 < m; i1 += row_block) {
      const int64_t mc = std::min(row_block, m - i1);
      pack_panels(a + i1 * a_row + p0 * a_col, a_row, a_col, mc, kc, a_packed);
      const int64_t tiles = (mc + kTileRows - 1) / kTileRows;
      for (int64_t j0 = 0; j0 < n; j0 += NR) {
        const int64_t w = std::min(NR, n - j0);
        sgemm_avx512_pack_b(trans_b ? b + j0 * ldb + p0 : b + p0 * ldb + j0, ldb, trans_b, w, kc, b_block);
        const LinesAhead next = j0 + NR < n ? LinesAhead::of_block(b, ldb, trans_b, p0, kc, j0 + NR,
                                                                   std::min(NR, n - j0 - NR))
                                            : LinesAhead();
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t i = t * kTileRows;
          panel_tile(std::min(kTileRows, mc - i), w, kc, a_packed + i * kc, b_block, alpha, pass_beta,
                     c + (i1 + i) * ldc + j0, ldc, next.share(t, tiles));
        }
      }
    }
  }
}

#else  // not x86-64: the BLAS does all products

void sgemm_avx512_rows(int64_t, int64_t, int64_t, float, const float *, int64_t, int64_t, const float *, int64_t,
                       int64_t, float, float *, int64_t) {}
void sgemm_avx512_pack_b(const float *, int64_t, bool, int64_t, int64_t, float *) {}
void sgemm_avx512_blocked(int64_t, int64_t, int64_t, float, const float *, int64_t, int64_t, const float *, int64_t,
                          bool, float, float *, int64_t) {}
void sgemm_avx512_transpose_tile(const float *, int64_t, float *, int64_t) {}
void sgemm_avx512_dots(int64_t, int64_t, int64_t, float, const float *, int64_t, const float *, int64_t, float, float *,
                       int64_t) {}

#endif

}  // namespace kiln::cpu
