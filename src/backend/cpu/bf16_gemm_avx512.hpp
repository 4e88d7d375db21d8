// kiln's bf16 matrix kernel for CPUs with AVX-512 BF16 (Cooper Lake,
// Sapphire Rapids, Zen 4 and later): vdpbf16ps multiplies pairs of bf16
// values exactly and adds them into fp32 accumulators, so the products are
// the conversion path's (bf16 inputs widened to f32, fp32 multiply-adds)
// and only the order of the fp32 additions differs. gemm.cpp runs it for
// bf16 products where avx512_bf16_available() (cpu_features.hpp) says yes.
// tests/cpu_bf16_gemm_test.cpp checks it against the conversion path and a
// float64 reference on a CPU that has it (and skips elsewhere).
#pragma once

#include <cstdint>

namespace kiln::cpu {

// The kernel computes C in blocks of this many columns.
constexpr int64_t kBf16BlockCols = 32;

// 32-bit words of one packed block of columns, and of all of op(B) [k, n].
inline int64_t bf16_packed_block(int64_t k) { return kBf16BlockCols * ((k + 1) / 2); }
inline int64_t bf16_packed_size(int64_t n, int64_t k) {
  return (n + kBf16BlockCols - 1) / kBf16BlockCols * bf16_packed_block(k);
}

// Packs op(B) ([k, n]; B stored [n, k] when trans_b, else [k, n]) into the
// layout vdpbf16ps reads: blocks of kBf16BlockCols columns one after
// another, each ceil(k / 2) rows of 32 words, word (q, j) holding
// B(2q, j) in its low half and B(2q + 1, j) in its high half. Halves past k
// and columns past n are zero. out holds bf16_packed_size(n, k) words.
void bf16_pack_b(const uint16_t *b, bool trans_b, int64_t n, int64_t k, uint32_t *out);

// C[m, n] = alpha * A op(B) + beta * C (beta = 0 never reads C), all bf16
// with fp32 accumulation; each result is rounded to bf16 once, as the
// conversion path does. A is read with any strides,
// A(i, p) = a[i * a_row + p * a_col]; b points at the packed block of C's
// first column (bf16_pack_b's output, plus whole blocks for a caller that
// splits C's columns). Only after avx512_bf16_available().
void bf16_gemm_avx512_rows(int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a, int64_t a_row,
                           int64_t a_col, const uint32_t *b, float beta, uint16_t *c, int64_t ldc);

}  // namespace kiln::cpu
