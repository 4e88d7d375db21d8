// kiln's own single-precision matrix kernels for AVX-512 CPUs, used for the
// f32 products of MLP training: a register-blocked kernel for the small
// ones, where it beats a BLAS call (no packing of A, no per-call setup), and
// a cache-blocked one for the large ones. Neither depends on the BLAS
// recognising the CPU (Debian's OpenBLAS 0.3.21 runs newer Xeons with its
// SSE3 "Prescott" kernels, 3x slower). Row-major.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// The kernel computes C in blocks of this many columns.
constexpr int64_t kSgemmBlockCols = 32;

// The register-blocked kernel: B must have contiguous rows, so callers
// repack a transposed B first.
// C[m,n] = alpha * A B + beta * C (beta = 0 never reads C). A is read with
// any strides, A(i, p) = a[i * a_row + p * a_col] (so A may be transposed).
// B is read in blocks of kSgemmBlockCols columns with contiguous rows:
// B(p, j) = b[(j / 32) * b_block + p * ldb + j % 32]. A plain row-major B
// has b_block = 32; B packed block after block (each [k, 32], no 4 KiB
// aliasing between rows) has ldb = 32 and b_block = 32 * k.
void sgemm_avx512_rows(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t a_row, int64_t a_col,
                       const float *b, int64_t ldb, int64_t b_block, float beta, float *c, int64_t ldc);

// C[m, n] = alpha * A B^T + beta * C (beta = 0 never reads C) for a narrow
// C, n <= kSgemmDotsMaxCols: A [m, k] and B [n, k] row-major (lda, ldb), each
// element a dot product along k, two rows of A sharing each load of B (2 x
// 12 accumulators fill the registers). For a classifier's last layer (10
// outputs), where sgemm_avx512_rows fills 10 of 16 lanes and broadcasts an
// element of A per row and step: 256 x 10 x 1024 in 50 us instead of 89.
void sgemm_avx512_dots(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                       int64_t ldb, float beta, float *c, int64_t ldc);
constexpr int64_t kSgemmDotsMaxCols = 12;

// dst[i * ldd + j] = src[j * lds + i] for a 16 x 16 tile of floats (also
// used to pack the inference weights, packed_linear_x86.cpp).
void sgemm_avx512_transpose_tile(const float *src, int64_t lds, float *dst, int64_t ldd);

// Packs op(B) [k, n] into the blocked layout above (ldb = 32, b_block =
// 32 * k): op(B)(p, j) = trans_b ? b[j * ldb + p] : b[p * ldb + j]. out holds
// ceil(n / 32) * 32 * k floats, and columns past n in the last block are left
// unwritten (the kernels mask them).
void sgemm_avx512_pack_b(const float *b, int64_t ldb, bool trans_b, int64_t n, int64_t k, float *out);

// The blocked kernel's tiles of C have this many rows (and kSgemmBlockCols
// columns). It finishes a panel's last rows in tiles of 8 and 4 at nearly
// the same speed, so callers splitting a product's rows over threads split
// them in multiples of kSgemmSplitRows, into near-equal parts.
constexpr int64_t kSgemmTileRows = 12;
constexpr int64_t kSgemmSplitRows = 4;

// C[m, n] = alpha * A op(B) + beta * C (beta = 0 never reads C) for products
// too large for sgemm_avx512_rows to keep in cache: blocked over k and rows
// of A, op(B) packed one [256, 32] block at a time (L1-sized), 12 x 32 tiles
// of C, A packed into 12-row panels. A is row-major (a_col = 1) or stored
// transposed (a_row = 1): A(i, p) = a[i * a_row + p * a_col].
// op(B)(p, j) = trans_b ? b[j * ldb + p] : b[p * ldb + j]. The packing
// buffers are per calling thread, grown once and reused.
void sgemm_avx512_blocked(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t a_row, int64_t a_col,
                          const float *b, int64_t ldb, bool trans_b, float beta, float *c, int64_t ldc);

}  // namespace kiln::cpu
