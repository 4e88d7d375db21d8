// kiln's own single-precision matrix kernels for AVX-512 CPUs, used for the
// small products of MLP training where they beat a BLAS call: no packing, no
// per-call setup, and no dependence on the BLAS recognising the CPU (Debian's
// OpenBLAS 0.3.21 runs newer Xeons with its SSE3 "Prescott" kernels, 3x
// slower). Row-major throughout; both kernels compute
// C[m,n] = alpha * A B + beta * C, and beta = 0 never reads C.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// Whether this CPU (and OS) runs AVX-512F code.
bool avx512_available();

// B's rows contiguous: B(p, j) = b[p * ldb + j]; A read with any strides,
// A(i, p) = a[i * a_row + p * a_col] (so A may be transposed).
void sgemm_avx512_rows(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t a_row, int64_t a_col,
                       const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

// A and B both contiguous along k: A(i, p) = a[i * lda + p] and
// B(p, j) = bt[j * ldb + p] (B stored transposed, as y = x W^T reads W).
void sgemm_avx512_dots(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *bt,
                       int64_t ldb, float beta, float *c, int64_t ldc);

}  // namespace kiln::cpu
