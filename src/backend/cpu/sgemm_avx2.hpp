// kiln's single-precision products for CPUs with AVX2 and FMA but without
// AVX-512 (Haswell to Alder Lake, AMD Zen 1 to 3), where sgemm_avx512.hpp's
// kernels do not run and OpenBLAS did the products before: a cache-blocked
// kernel for the large f32 products of MLP training and a register-blocked
// one for the small ones (gemm.cpp chooses). On a 2-core Zen 3 EPYC VM,
// with OpenBLAS 0.3.21's Zen kernels in alternating steps (bench/
// kiln_cpu_products_bench; bench/results/cpu-avx2-2026-11-28.md): the
// blocked kernel ran the products of a 784-1024-1024-10 step at batch 256
// 3 to 4% faster on one thread (both at 65 to 86% of the core's FMA peak
// as the VM's state moved) and 16 to 19% faster on two, since each thread
// packs the operands of its panel once where each BLAS call repacks its
// own; the register-blocked one ran that step's output-layer products 1.2
// to 1.9 times as fast. Like the AVX-512 kernels they do not depend on the
// BLAS recognising the CPU. Row-major.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::cpu {

// The kernel's tiles of C have up to kSgemmAvx2TileRows rows and
// kSgemmAvx2BlockCols columns (two vectors of 8 floats: 12 accumulators of
// the 16 registers). Callers splitting a product over threads split its
// columns at multiples of kSgemmAvx2BlockCols (blocks are packed whole) and
// its rows at multiples of kSgemmAvx2SplitRows.
constexpr int64_t kSgemmAvx2BlockCols = 16;
constexpr int64_t kSgemmAvx2TileRows = 6;
constexpr int64_t kSgemmAvx2SplitRows = 2;

// C[m, n] = alpha * A op(B) + beta * C (beta = 0 never reads C), as
// sgemm_avx512_blocked: A(i, p) = a[i * a_row + p * a_col] (a_col = 1, or
// a_row = 1 for an A stored transposed), op(B)(p, j) = trans_b ? b[j * ldb +
// p] : b[p * ldb + j]. Blocked over k and rows of A; A packed into panels
// of kSgemmAvx2TileRows rows, op(B) one [depth, 16] block at a time (up to
// 512 steps deep, 32 KiB). The packing buffers are per calling thread,
// grown once and reused; growing one can throw OUT_OF_MEMORY.
void sgemm_avx2_blocked(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t a_row, int64_t a_col,
                        const float *b, int64_t ldb, bool trans_b, float beta, float *c, int64_t ldc);

// C[m, n] = alpha * A B + beta * C (beta = 0 never reads C) in registers
// alone, as sgemm_avx512_rows: tiles of up to kSgemmAvx2TileRows rows by
// kSgemmAvx2BlockCols columns over all of k, A read in place, A(i, p) =
// a[i * a_row + p * a_col], and B read in blocks of 16 columns with
// contiguous rows, B(p, j) = b[(j / 16) * b_block + p * ldb + j % 16] (a
// plain row-major B has b_block = 16, one packed by sgemm_avx2_pack_b has
// ldb = 16 and b_block = 16 * k). For the products too small to repay
// sgemm_avx2_blocked's packing of A.
void sgemm_avx2_rows(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t a_row, int64_t a_col,
                     const float *b, int64_t ldb, int64_t b_block, float beta, float *c, int64_t ldc);

// Packs op(B) [k, n] into sgemm_avx2_rows's blocked layout (ldb = 16,
// b_block = 16 * k): op(B)(p, j) = trans_b ? b[j * ldb + p] : b[p * ldb + j].
// out holds ceil(n / 16) * 16 * k floats; columns past n are zeros.
void sgemm_avx2_pack_b(const float *b, int64_t ldb, bool trans_b, int64_t n, int64_t k, float *out);

// dst[i * ldd + j] = src[j * lds + i] for an 8 x 8 tile of floats (also
// used to pack the inference weights, packed_linear_x86.cpp). Only on a CPU
// where avx2_fma_available() (cpu_features.hpp).
void sgemm_avx2_transpose8(const float *src, int64_t lds, float *dst, int64_t ldd);

#if defined(__x86_64__)
// Lanes [0, count) of a vector of 8 floats, count clamped to [0, 8], as
// _mm256_maskload_ps and _mm256_maskstore_ps take them (also for the
// inference kernels' partial vectors).
__attribute__((target("avx2"))) inline __m256i avx2_first_lanes(int64_t count) {
  const int n = int(std::clamp<int64_t>(count, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

}  // namespace kiln::cpu
