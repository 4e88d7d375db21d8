// What the CPU's own products (sgemm_avx512.cpp, sgemm_avx2.cpp) share:
// the depth up to which they write C row by row, the sizes of the blocks
// they cut a matrix into, and the lines of the next block of op(B) that
// their tiles prefetch.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace kiln::cpu {

// Steps of k up to which the register-blocked kernels (sgemm_avx512_rows,
// sgemm_avx2_rows) write C row block by row block (a product bound by
// writing C); callers splitting such a product over threads split its
// rows, so that each writes whole rows too.
constexpr int64_t kSgemmShortDepth = 16;

// The size of the fewest equal parts of `extent`, at most `most` each,
// rounded up to a multiple of `unit`: the depth of the passes over k (whole
// transposes) and the blocks of rows. Equal parts leave no short last pass.
inline int64_t even_part(int64_t extent, int64_t most, int64_t unit) {
  const int64_t parts = (extent + most - 1) / most;
  const int64_t part = (extent + parts - 1) / parts;
  return (part + unit - 1) / unit * unit;
}

#if defined(__x86_64__)
// Cache lines that a tile asks for one at a time while it computes, spread
// over its steps, after the lines of its own C (which its epilogue reads or
// writes): its share of the source of the next block of op(B), which the
// packing reads once this block's tiles are done. Line q is at base + (q /
// per_row) * ld + (q % per_row) * 16 floats. Without them the packing
// waited on the L3 or memory for each of those lines, 4 to 10% of the time
// of the large products of a 784-1024-1024-10 step; in a burst before each
// tile, they held the L1's miss buffers and the tile waited instead. Spread
// one per 6 to 8 steps, the step's five large products ran 2 to 2.5% faster
// (one Zen 5 core, AVX-512, alternating calls in one process).
struct LinesAhead {
  const float *base = nullptr;
  int64_t ld = 0, per_row = 1;
  int64_t first = 0, count = 0;  // this tile's lines: [first, first + count)

  // Always inlined: GCC 12 otherwise found an out-of-line copy free of
  // side effects (a prefetch is none) and dropped every call to it.
  __attribute__((always_inline)) void prefetch(int64_t i) const {
    const int64_t q = first + i;
    _mm_prefetch(reinterpret_cast<const char *>(base + (q / per_row) * ld + (q % per_row) * 16), _MM_HINT_T0);
  }
  // The lines of one packed block's source: rows [j0, j0 + w) of b from
  // column p0, kc floats each (trans_b), or rows [p0, p0 + kc) from column
  // j0, w floats each.
  static LinesAhead of_block(const float *b, int64_t ldb, bool trans_b, int64_t p0, int64_t kc, int64_t j0,
                             int64_t w) {
    LinesAhead lines;
    lines.ld = ldb;
    if (trans_b) {
      lines.base = b + j0 * ldb + p0, lines.per_row = (kc + 15) / 16, lines.count = w * lines.per_row;
    } else {
      lines.base = b + p0 * ldb + j0, lines.per_row = (w + 15) / 16, lines.count = kc * lines.per_row;
    }
    return lines;
  }
  // Share t of `shares` equal shares.
  LinesAhead share(int64_t t, int64_t shares) const {
    LinesAhead part = *this;
    part.first = first + count * t / shares;
    part.count = first + count * (t + 1) / shares - part.first;
    return part;
  }
};
#endif

}  // namespace kiln::cpu
