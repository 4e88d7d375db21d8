// Matrix products through OpenBLAS (row-major CBLAS).
//
// Threading: OpenBLAS is set to one thread and kiln splits each product
// into row (or column) panels over its own pool. The MLPs kiln trains are
// made of small products (e.g. [128, 784] x [784, 32]) where OpenBLAS's own
// threads cost more to wake than the work takes, and one set of threads
// avoids two pools fighting over the cores. Note that openblas_set_num_threads
// is process-wide: an application using OpenBLAS itself sees it too.
//
// f16 and bf16 are converted to f32 panels in per-thread scratch buffers
// that grow to the largest product seen and are reused, so steady-state
// training allocates nothing here.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/dtype_traits.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/sgemm_avx512.hpp"

namespace kiln::cpu {

namespace {

// Multiply-adds per panel below which a product runs on one thread: about
// 5-10 microseconds of single-core work, enough to repay the hand-off.
constexpr int64_t kGemmGrain = int64_t(1) << 18;

template <class S>
struct Blas;

template <>
struct Blas<float> {
  static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, double alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, double beta, float *c, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta, tb, blasint(m), blasint(n), blasint(k), float(alpha), a, blasint(lda), b,
                blasint(ldb), float(beta), c, blasint(ldc));
  }
};

template <>
struct Blas<double> {
  static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, double alpha,
                   const double *a, int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc) {
    cblas_dgemm(CblasRowMajor, ta, tb, blasint(m), blasint(n), blasint(k), alpha, a, blasint(lda), b, blasint(ldb),
                beta, c, blasint(ldc));
  }
};

// Products up to this many multiply-adds use kiln's AVX-512 kernels where
// the CPU has them; larger ones go to the BLAS, whose cache blocking wins.
constexpr int64_t kOwnKernelMax = int64_t(1) << 26;

// One panel of C = alpha * op(A) op(B) + beta * C: m x n of C at c (leading
// dimension ldc), with A and B at the panel's first row / column.
template <class S>
void gemm_panel(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const S *a, int64_t lda,
                const S *b, int64_t ldb, double beta, S *c, int64_t ldc, bool own_kernel) {
  if constexpr (std::is_same_v<S, float>) {
    if (own_kernel && !trans_b) {
      sgemm_avx512_rows(m, n, k, float(alpha), a, trans_a ? 1 : lda, trans_a ? lda : 1, b, ldb, float(beta), c, ldc);
      return;
    }
    if (own_kernel && !trans_a) {
      sgemm_avx512_dots(m, n, k, float(alpha), a, lda, b, ldb, float(beta), c, ldc);
      return;
    }
  }
  Blas<S>::gemm(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
                ldb, beta, c, ldc);
}

// C = alpha * op(A) op(B) + beta * C over panels of C's rows or columns,
// whichever dimension is longer, one kernel call per panel.
template <class S>
void split_gemm(ThreadPool &pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                const S *a, const S *b, double beta, S *c) {
  const int64_t lda = std::max<int64_t>(1, trans_a ? m : k), ldb = std::max<int64_t>(1, trans_b ? k : n);
  const int64_t ldc = std::max<int64_t>(1, n);
  const bool own_kernel = std::is_same_v<S, float> && !(trans_a && trans_b) && m * n * k <= kOwnKernelMax &&
                          avx512_available();
  if (m >= n) {
    const int64_t grain = std::max<int64_t>(1, kGemmGrain / std::max<int64_t>(1, n * k));
    pool.parallel_for(m, grain, [&](int64_t begin, int64_t end) {
      const S *a_panel = trans_a ? a + begin : a + begin * k;
      gemm_panel(trans_a, trans_b, end - begin, n, k, alpha, a_panel, lda, b, ldb, beta, c + begin * n, ldc,
                 own_kernel);
    });
  } else {
    const int64_t grain = std::max<int64_t>(1, kGemmGrain / std::max<int64_t>(1, m * k));
    pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
      const S *b_panel = trans_b ? b + begin * k : b + begin;
      gemm_panel(trans_a, trans_b, m, end - begin, k, alpha, a, lda, b_panel, ldb, beta, c + begin, ldc, own_kernel);
    });
  }
}

// f32 copies of f16/bf16 operands, one set per calling thread.
struct HalfScratch {
  std::vector<float> a, b, c;
};

template <class T>
void to_f32(const typename T::Storage *in, int64_t n, std::vector<float> &out) {
  if (int64_t(out.size()) < n) out.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = T::load(in[i]);
}

template <class T>
void half_gemm(ThreadPool &pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
               const void *a, const void *b, double beta, void *c) {
  using S = typename T::Storage;
  thread_local HalfScratch scratch;
  to_f32<T>(static_cast<const S *>(a), m * k, scratch.a);
  to_f32<T>(static_cast<const S *>(b), k * n, scratch.b);
  S *cs = static_cast<S *>(c);
  if (beta != 0) {
    to_f32<T>(cs, m * n, scratch.c);
  } else if (int64_t(scratch.c.size()) < m * n) {
    scratch.c.resize(size_t(m * n));
  }
  split_gemm<float>(pool, trans_a, trans_b, m, n, k, alpha, scratch.a.data(), scratch.b.data(), beta,
                    scratch.c.data());
  for (int64_t i = 0; i < m * n; ++i) cs[i] = T::store(scratch.c[size_t(i)]);
}

// C = beta * C, for products with k = 0 (BLAS rejects a zero leading
// dimension). beta = 0 writes zeros, ignoring what C held (NaN included).
template <class T>
void scale_c(int64_t count, double beta, void *c) {
  using S = typename T::Storage;
  S *cs = static_cast<S *>(c);
  for (int64_t i = 0; i < count; ++i) {
    cs[i] = beta == 0 ? T::store(typename T::Compute(0)) : T::store(typename T::Compute(beta * T::load(cs[i])));
  }
}

}  // namespace

void init_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void gemm(ThreadPool &pool, DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const void *a, const void *b, double beta, void *c) {
  if (m <= 0 || n <= 0) return;
  // blasint is 32 bits here: dimensions and leading dimensions must fit.
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
    fail(KILN_ERROR_NOT_SUPPORTED, "matrix product [" + std::to_string(m) + ", " + std::to_string(k) + "] x [" + std::to_string(k) + ", " +
                                       std::to_string(n) + "] has a dimension beyond the BLAS limit of 2^31 - 1");
  }
  dispatch_float(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    if (k <= 0) {
      scale_c<T>(m * n, beta, c);
    } else if constexpr (T::kIdentity) {
      split_gemm<S>(pool, trans_a, trans_b, m, n, k, alpha, static_cast<const S *>(a), static_cast<const S *>(b),
                    beta, static_cast<S *>(c));
    } else {
      half_gemm<T>(pool, trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
    }
  });
}

}  // namespace kiln::cpu
