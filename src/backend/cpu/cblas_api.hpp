// The part of OpenBLAS's C interface the CPU backend calls (gemm.cpp),
// declared here instead of taken from <cblas.h>: libkiln never links
// OpenBLAS (gemm.cpp loads it at run time), so building kiln needs none of
// its files, one dependency fewer on a bare machine such as the GPU image.
// Values and signatures are CBLAS's and the LP64 OpenBLAS's (blasint is int);
// tests/cblas_api_test.cpp checks them against <cblas.h> wherever that
// header is installed.
#pragma once

namespace kiln::cpu {

using blasint = int;
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };

using cblas_sgemm_fn = void (*)(CBLAS_ORDER order, CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, blasint m,
                                blasint n, blasint k, float alpha, const float *a, blasint lda, const float *b,
                                blasint ldb, float beta, float *c, blasint ldc);
using cblas_dgemm_fn = void (*)(CBLAS_ORDER order, CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, blasint m,
                                blasint n, blasint k, double alpha, const double *a, blasint lda, const double *b,
                                blasint ldb, double beta, double *c, blasint ldc);
using openblas_set_num_threads_fn = void (*)(int num_threads);

}  // namespace kiln::cpu
