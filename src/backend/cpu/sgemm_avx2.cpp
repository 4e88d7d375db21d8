// The AVX2 + FMA blocked sgemm; see sgemm_avx2.hpp. Every function here
// that uses AVX2 carries the target attribute itself and runs only after
// avx2_fma_available() said yes, so libkiln still loads on any x86-64.
#include "backend/cpu/sgemm_avx2.hpp"

#include <algorithm>

#include "backend/cpu/aligned_buffer.hpp"
#include "backend/cpu/blocking.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::cpu {

#if defined(__x86_64__)

#define KILN_AVX2 __attribute__((target("avx2,fma")))

namespace {

constexpr int64_t NR = kSgemmAvx2BlockCols, MR = kSgemmAvx2TileRows;
// Most steps of k per pass. Each pass after the first reads C back and
// writes it again, from and to the L3 for the 1 MiB C of a 256 x 1024
// product. Passes of 512 steps (a packed [512, 16] block of op(B), 32 KiB,
// which beside the panel of A no longer fits the L1: part of it streams
// from the L2) make half as many as passes of 256, whose block stayed in
// the L1: the five large products of a 784-1024-1024-10 step at batch 256
// took 0.943 to 0.980 times as long on a Zen 3 core (bench/sgemm_avx2_ab.sh,
// four runs; the kernel against itself 0.99 to 1.02). Passes of 384 or 768
// steps were no faster.
constexpr int64_t kMaxDepth = 512;
// Floats of A packed at once (a row block), 1 MiB: the 256 rows of a batch
// in one block at 512 steps and a weight gradient's 1024 rows at 256, so
// each block of op(B) is packed once per pass (each row block packs all of
// op(B) again). The block is larger than a Zen 3 core's 512 KiB L2, but each
// tile reads its panel of A in order, 24 bytes a step, and the hardware's
// prefetcher streams it in: with 512 KiB blocks (three row blocks for a
// weight gradient, two for a batch of 256 at 512 steps) the products were
// no faster (1 to 2% slower, about as much as the kernel varies against
// itself).
constexpr int64_t kPackedA = 256 * 1024;
// Most steps of k between two of a tile's prefetches (LinesAhead).
constexpr int64_t kStepsPerLine = 8;

// r[i] (row i of an 8 x 8 tile) becomes column i.
KILN_AVX2 inline __attribute__((always_inline)) void transpose_in_registers(__m256 (&r)[8]) {
  __m256 t[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
    t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = t[i];
}

// The panel of rows [0, rows) (rows <= MR) of a row-major A over kc steps:
// out[p * MR + r] = a[r * lda + p], zeros for the rows past `rows`. Eight
// steps at a time through an 8 x 8 transpose whose 8-float stores overlap:
// each writes two floats of the next step, which the next store overwrites,
// and the last one two floats past the panel (the buffer has room for them;
// they belong to the next panel, packed after this one).
KILN_AVX2 void pack_rows(const float *a, int64_t lda, int64_t rows, int64_t kc, float *out) {
  __m256 r[8];
  int64_t p0 = 0;
  for (; p0 + 8 <= kc; p0 += 8) {
#pragma GCC unroll 8
    for (int64_t q = 0; q < 8; ++q) r[q] = q < rows ? _mm256_loadu_ps(a + q * lda + p0) : _mm256_setzero_ps();
    transpose_in_registers(r);
#pragma GCC unroll 8
    for (int64_t q = 0; q < 8; ++q) _mm256_storeu_ps(out + (p0 + q) * MR, r[q]);
  }
  for (int64_t p = p0; p < kc; ++p)
    for (int64_t i = 0; i < MR; ++i) out[p * MR + i] = i < rows ? a[i * lda + p] : 0.0f;
}

// Panels of a transposed A packed together, step by step: eight panels'
// 48 values of a step are three whole cache lines of a row of the stored
// matrix (one panel at a time, each step read parts of a line that the next
// panel read again, likely evicted by then: see sgemm_avx512.cpp).
constexpr int64_t kPackGroupRows = 8 * MR;

// The panels of rows [0, rows) of A over kc steps, panel i / MR at out + i *
// kc: out[i * kc + p * MR + r] = A(i + r, p), zeros past the last row.
// A(i, p) = a[i * a_row + p * a_col], with a_col = 1 or a_row = 1.
KILN_AVX2 void pack_panels(const float *a, int64_t a_row, int64_t a_col, int64_t rows, int64_t kc, float *out) {
  if (a_row != 1) {
    for (int64_t i = 0; i < rows; i += MR) pack_rows(a + i * a_row, a_row, std::min(MR, rows - i), kc, out + i * kc);
    return;
  }
  const int64_t whole = rows / MR * MR;  // rows in whole panels
  for (int64_t g0 = 0; g0 < rows; g0 += kPackGroupRows) {
    const int64_t g1 = std::min(rows, g0 + kPackGroupRows), whole_end = std::min(whole, g1);
    for (int64_t p = 0; p < kc; ++p) {
      const float *step = a + p * a_col;
      float *to = out + p * MR;
      int64_t i = g0;
      for (; i < whole_end; i += MR) {  // 4 + 2 floats: an 8-float load could pass the matrix's end
        _mm_storeu_ps(to + i * kc, _mm_loadu_ps(step + i));
        _mm_storel_pi(reinterpret_cast<__m64 *>(to + i * kc + 4),
                      _mm_loadl_pi(_mm_setzero_ps(), reinterpret_cast<const __m64 *>(step + i + 4)));
      }
      if (i < g1)
        for (int64_t r = 0; r < MR; ++r) to[i * kc + r] = i + r < rows ? step[i + r] : 0.0f;
    }
  }
}

// op(B)'s columns [0, w) (w <= NR) over kc steps into out[p * NR + j], the
// columns past w zeros, so that the tiles always compute whole vectors.
KILN_AVX2 void pack_b(const float *b, int64_t ldb, bool trans_b, int64_t w, int64_t kc, float *out) {
  if (!trans_b) {
    const __m256i mask0 = avx2_first_lanes(w), mask1 = avx2_first_lanes(w - 8);
    for (int64_t p = 0; p < kc; ++p) {
      const float *row = b + p * ldb;
      _mm256_storeu_ps(out + p * NR, _mm256_maskload_ps(row, mask0));
      _mm256_storeu_ps(out + p * NR + 8, _mm256_maskload_ps(row + 8, mask1));
    }
    return;
  }
  int64_t p0 = 0;
  if (w == NR) {
    // 16 steps at a time (8 at the end), each 8 rows' transposes one after
    // the other: a row's line is read whole at once, where with 8 steps a
    // time its second half was read after the other 15 rows' lines, which
    // (rows 4 KiB apart, as for a weight of 1024 inputs) share its L1 set
    // and had often evicted it. The step's products took 0.976 and 0.990
    // times as long, 18 of 24 alternating rounds won each time: about 1%, no
    // more than the kernel varies against itself (0.99 to 1.02).
    while (kc - p0 >= 8) {
      const int64_t steps = std::min<int64_t>(16, (kc - p0) / 8 * 8);
      for (int64_t j = 0; j < NR; j += 8)
        for (int64_t s = 0; s < steps; s += 8)
          sgemm_avx2_transpose8(b + j * ldb + p0 + s, ldb, out + (p0 + s) * NR + j, NR);
      p0 += steps;
    }
  }
  for (int64_t p = p0; p < kc; ++p)
    for (int64_t j = 0; j < NR; ++j) out[p * NR + j] = j < w ? b[j * ldb + p] : 0.0f;
}

// One step of k of a tile: two vectors of B times R broadcast values of A
// into 2R accumulators. With R = 6, 12 FMAs to 8 loads, and 12 independent
// chains cover the FMA's latency on two ports.
//
// No software prefetch of A's panel, unlike the AVX-512 tile: it is read
// in order, 24 bytes a step, and the hardware's stream prefetcher keeps up.
// On a Zen 3 core, a prefetch every step held the tile at 70-74 GFLOP/s
// with its operands in the L1 (89-91 without, the core's FMA peak), and
// the five large products of a 784-1024-1024-10 step at batch 256 took
// 4% longer on one thread (12 alternating processes) and 3% longer on two
// (40 alternating calls).
template <int64_t R>
KILN_AVX2 __attribute__((always_inline)) inline void tile_step(const float *a, const float *b, __m256 (&acc0)[R],
                                                               __m256 (&acc1)[R]) {
  const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
  for (int64_t r = 0; r < R; ++r) {
    const __m256 av = _mm256_broadcast_ss(a + r);
    acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
    acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
  }
}

// A vector of C: 8 floats, or the lanes of `mask` (the last block's).
template <bool kWhole>
KILN_AVX2 inline __m256 load_c(const float *c, __m256i mask) {
  if constexpr (kWhole) return _mm256_loadu_ps(c);
  else return _mm256_maskload_ps(c, mask);
}
template <bool kWhole>
KILN_AVX2 inline void store_c(float *c, __m256i mask, __m256 v) {
  if constexpr (kWhole) _mm256_storeu_ps(c, v);
  else _mm256_maskstore_ps(c, mask, v);
}

// C[R, w] = alpha * acc + beta * C (beta = 0 never reads C): whole vectors
// for a whole block of 16 columns, masked ones for a last block of w.
template <int64_t R, bool kWhole>
KILN_AVX2 __attribute__((always_inline)) inline void store_tile(const __m256 (&acc0)[R], const __m256 (&acc1)[R],
                                                                int64_t w, float alpha, float beta, float *c,
                                                                int64_t ldc) {
  const __m256 alpha_v = _mm256_set1_ps(alpha), beta_v = _mm256_set1_ps(beta);
  const __m256i mask0 = avx2_first_lanes(w), mask1 = avx2_first_lanes(w - 8);
#pragma GCC unroll 6
  for (int64_t r = 0; r < R; ++r) {
    float *cr = c + r * ldc;
    __m256 v0 = _mm256_mul_ps(acc0[r], alpha_v), v1 = _mm256_mul_ps(acc1[r], alpha_v);
    if (beta != 0) {
      v0 = _mm256_fmadd_ps(beta_v, load_c<kWhole>(cr, mask0), v0);
      v1 = _mm256_fmadd_ps(beta_v, load_c<kWhole>(cr + 8, mask1), v1);
    }
    store_c<kWhole>(cr, mask0, v0);
    store_c<kWhole>(cr + 8, mask1, v1);
  }
}

// C[R, w] = alpha * A B + beta * C over kc steps: A R rows of a packed [kc,
// MR] panel, B a packed [kc, NR] block, asking for C's R lines and then
// for `ahead` on the way, one line per `every` steps.
template <int64_t R>
KILN_AVX2 void tile(int64_t kc, const float *a, const float *b, int64_t w, float alpha, float beta, float *c,
                    int64_t ldc, const LinesAhead &ahead) {
  __m256 acc0[R], acc1[R];
#pragma GCC unroll 6
  for (int64_t r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  const int64_t lines = R + ahead.count;
  const int64_t every = std::clamp<int64_t>(kc / lines, 1, kStepsPerLine);
  int64_t p = 0, line = 0;
  for (; kc < R && line < R; ++line) _mm_prefetch(reinterpret_cast<const char *>(c + line * ldc), _MM_HINT_T0);
  for (; line < lines && p + every <= kc; ++line) {
    if (line < R) _mm_prefetch(reinterpret_cast<const char *>(c + line * ldc), _MM_HINT_T0);
    else ahead.prefetch(line - R);
    for (int64_t s = 0; s < every; ++s, ++p) tile_step<R>(a + p * MR, b + p * NR, acc0, acc1);
  }
#pragma GCC unroll 4
  for (; p < kc; ++p) tile_step<R>(a + p * MR, b + p * NR, acc0, acc1);
  if (w == NR) {
    store_tile<R, true>(acc0, acc1, w, alpha, beta, c, ldc);
  } else {
    store_tile<R, false>(acc0, acc1, w, alpha, beta, c, ldc);
  }
}

// One step of k of rows_tile: two vectors of B (masked for a last block
// narrower than NR, whose row may end the matrix) times R values of A read
// in place, a_row apart.
template <int64_t R, bool kWhole>
KILN_AVX2 __attribute__((always_inline)) inline void rows_step(const float *a, int64_t a_row, const float *b,
                                                               __m256i mask0, __m256i mask1, __m256 (&acc0)[R],
                                                               __m256 (&acc1)[R]) {
  const __m256 b0 = load_c<kWhole>(b, mask0), b1 = load_c<kWhole>(b + 8, mask1);
#pragma GCC unroll 6
  for (int64_t r = 0; r < R; ++r) {
    const __m256 av = _mm256_broadcast_ss(a + r * a_row);
    acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
    acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
  }
}

// C[R, w] = alpha * A B + beta * C over all k steps for sgemm_avx2_rows: A
// read in place, A(r, p) = a[r * a_row + p * a_col], and B's rows of w <=
// NR columns ldb apart.
template <int64_t R, bool kWhole>
KILN_AVX2 void rows_tile(int64_t k, const float *a, int64_t a_row, int64_t a_col, const float *b, int64_t ldb,
                         int64_t w, float alpha, float beta, float *c, int64_t ldc) {
  const __m256i mask0 = avx2_first_lanes(w), mask1 = avx2_first_lanes(w - 8);
  __m256 acc0[R], acc1[R];
#pragma GCC unroll 6
  for (int64_t r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
#pragma GCC unroll 2
  for (int64_t p = 0; p < k; ++p) rows_step<R, kWhole>(a + p * a_col, a_row, b + p * ldb, mask0, mask1, acc0, acc1);
  store_tile<R, kWhole>(acc0, acc1, w, alpha, beta, c, ldc);
}

using RowsTile = void (*)(int64_t, const float *, int64_t, int64_t, const float *, int64_t, int64_t, float, float,
                          float *, int64_t);
// rows_tile<r, whole> at [whole][r - 1].
constexpr RowsTile kRowsTiles[2][MR] = {{rows_tile<1, false>, rows_tile<2, false>, rows_tile<3, false>,
                                         rows_tile<4, false>, rows_tile<5, false>, rows_tile<6, false>},
                                        {rows_tile<1, true>, rows_tile<2, true>, rows_tile<3, true>, rows_tile<4, true>,
                                         rows_tile<5, true>, rows_tile<6, true>}};

// The height of the next tile of sgemm_avx2_rows with `left` rows to go:
// MR, but the last MR + 1 to 2 MR - 1 rows in two near-equal tiles, whose
// 8 or more accumulators still cover the FMA's latency (32 rows as 6, 6,
// 6, 6, 4, 4; a last tile of 2 rows would run at half speed).
inline int64_t rows_tile_height(int64_t left) {
  return left <= MR || left >= 2 * MR ? std::min(MR, left) : (left + 1) / 2;
}

using Tile = void (*)(int64_t, const float *, const float *, int64_t, float, float, float *, int64_t,
                      const LinesAhead &);
// tile<r> at index r - 1: a panel's last rows run a tile of their height.
constexpr Tile kTiles[MR] = {tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};

}  // namespace

KILN_AVX2 void sgemm_avx2_transpose8(const float *src, int64_t lds, float *dst, int64_t ldd) {
  __m256 r[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
  transpose_in_registers(r);
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * ldd, r[i]);
}

void sgemm_avx2_rows(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t a_row, int64_t a_col,
                     const float *b, int64_t ldb, int64_t b_block, float beta, float *c, int64_t ldc) {
  auto block = [&](int64_t i0, int64_t rows, int64_t j0) {
    const int64_t w = std::min(NR, n - j0);
    kRowsTiles[w == NR][rows - 1](k, a + i0 * a_row, a_row, a_col, b + (j0 / NR) * b_block, ldb, w, alpha, beta,
                                  c + i0 * ldc + j0, ldc);
  };
  // As sgemm_avx512_rows: with a few steps of k, C's rows are written whole,
  // one block of rows after the other, while all of B stays in the L1;
  // otherwise one block of B's columns stays in the cache while every block
  // of rows uses it. (Asking for the next block's lines on the way, as the
  // blocked tiles do, made the tutorial's weight gradient, 32 x 784 x 128
  // with B read in place, 20% slower on a Zen 3 core: likely two blocks of
  // B and all of A no longer fit in the L1 together.)
  if (k <= kSgemmShortDepth) {
    for (int64_t i0 = 0, rows; i0 < m; i0 += rows) {
      rows = rows_tile_height(m - i0);
      for (int64_t j0 = 0; j0 < n; j0 += NR) block(i0, rows, j0);
    }
    return;
  }
  for (int64_t j0 = 0; j0 < n; j0 += NR)
    for (int64_t i0 = 0, rows; i0 < m; i0 += rows) block(i0, rows = rows_tile_height(m - i0), j0);
}

void sgemm_avx2_pack_b(const float *b, int64_t ldb, bool trans_b, int64_t n, int64_t k, float *out) {
  for (int64_t j0 = 0; j0 < n; j0 += NR)
    pack_b(trans_b ? b + j0 * ldb : b + j0, ldb, trans_b, std::min(NR, n - j0), k, out + j0 * k);
}

void sgemm_avx2_blocked(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t a_row, int64_t a_col,
                        const float *b, int64_t ldb, bool trans_b, float beta, float *c, int64_t ldc) {
  thread_local AlignedBuffer<float> a_buffer, b_buffer;  // one pair per thread, grown by its first product
  const int64_t depth = even_part(k, kMaxDepth, 8);
  const int64_t row_block = even_part(m, std::max<int64_t>(MR, kPackedA / depth / MR * MR), MR);
  // + MR: the last panel's last step stores 8 floats (pack_rows).
  float *const a_packed = a_buffer.reserve(row_block * depth + MR, "for a packed matrix operand");
  float *const b_block = b_buffer.reserve(depth * NR, "for a packed matrix operand");
  for (int64_t p0 = 0; p0 < k; p0 += depth) {
    const int64_t kc = std::min(depth, k - p0);
    const float pass_beta = p0 == 0 ? beta : 1.0f;  // later passes add to what the first one stored
    for (int64_t i1 = 0; i1 < m; i1 += row_block) {
      const int64_t mc = std::min(row_block, m - i1);
      pack_panels(a + i1 * a_row + p0 * a_col, a_row, a_col, mc, kc, a_packed);
      for (int64_t j0 = 0; j0 < n; j0 += NR) {
        const int64_t w = std::min(NR, n - j0);
        pack_b(trans_b ? b + j0 * ldb + p0 : b + p0 * ldb + j0, ldb, trans_b, w, kc, b_block);
        const LinesAhead next = j0 + NR < n ? LinesAhead::of_block(b, ldb, trans_b, p0, kc, j0 + NR,
                                                                   std::min(NR, n - j0 - NR))
                                            : LinesAhead();
        const int64_t tiles = (mc + MR - 1) / MR;
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t i = t * MR;
          kTiles[std::min(MR, mc - i) - 1](kc, a_packed + i * kc, b_block, w, alpha, pass_beta,
                                           c + (i1 + i) * ldc + j0, ldc, next.share(t, tiles));
        }
      }
    }
  }
}

#else  // not x86-64: the BLAS does all products

void sgemm_avx2_blocked(int64_t, int64_t, int64_t, float, const float *, int64_t, int64_t, const float *, int64_t,
                        bool, float, float *, int64_t) {}
void sgemm_avx2_transpose8(const float *, int64_t, float *, int64_t) {}
void sgemm_avx2_rows(int64_t, int64_t, int64_t, float, const float *, int64_t, int64_t, const float *, int64_t, int64_t,
                     float, float *, int64_t) {}
void sgemm_avx2_pack_b(const float *, int64_t, bool, int64_t, int64_t, float *) {}

#endif

}  // namespace kiln::cpu
