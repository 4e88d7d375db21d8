// Matrix products: on CPUs with AVX-512, kiln's own f32 kernels
// (sgemm_avx512.hpp), the register-blocked one up to kOwnKernelMax
// multiply-adds and the cache-blocked one above; on CPUs with AVX2 and FMA
// only, those of sgemm_avx2.hpp: the register-blocked one up to
// kOwnKernelMax where it reads A from near caches (avx2_rows_fit), the
// cache-blocked one above kOwnKernelMax and above kAvx2BlockedMin where C
// is tall enough for it; OpenBLAS (row-major CBLAS) for everything else.
//
// Threading: OpenBLAS runs one thread and kiln splits each product into row
// (or column) panels over its own pool, whose workers already spin between
// the kernels of a training step. One set of threads keeps two pools from
// fighting over the cores, and the small products of an MLP (e.g. [128, 784]
// x [784, 32], ~50 us on one core) would not repay waking a second pool.
// openblas_set_num_threads is process-wide: an application using OpenBLAS
// itself sees it too.
//
// Loading: libkiln does not link OpenBLAS; init_blas loads it, with
// OPENBLAS_NUM_THREADS=1 in the environment for the length of the dlopen.
// The pthread OpenBLAS starts its worker threads in its ELF constructor,
// before any code of kiln's could call openblas_set_num_threads, and an
// embedded library must not start threads its host did not ask for (under
// an address-space limit one of them retries a 128 MB allocation forever and
// the process hangs in exit). Debian's serial OpenBLAS would start none but
// is built without locking, and kiln's pool calls the BLAS from several
// threads at once.
//
// f16 and bf16 are converted to f32 panels in per-thread scratch buffers
// that grow to the largest product seen and are reused, so steady-state
// training allocates nothing here; bf16 runs on kiln's AVX-512 BF16 kernel
// (bf16_gemm_avx512.hpp) instead where the CPU has it, with B packed into
// pairs in such a buffer.
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cstdlib>

#include <algorithm>
#include <atomic>
#include <climits>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/aligned_buffer.hpp"
#include "backend/cpu/bf16_gemm_avx512.hpp"
#include "backend/cpu/blocking.hpp"
#include "backend/cpu/cblas_api.hpp"
#include "backend/cpu/cpu_features.hpp"
#include "backend/cpu/dtype_traits.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/sgemm_avx2.hpp"
#include "backend/cpu/sgemm_avx512.hpp"

namespace kiln::cpu {

namespace {

// Multiply-adds per panel below which a product runs on one thread: about
// 5-10 microseconds of single-core work, enough to repay the hand-off.
constexpr int64_t kGemmGrain = int64_t(1) << 18;
// Floats of B per chunk of its packing: about 50 microseconds of copying.
constexpr int64_t kPackGrain = int64_t(1) << 17;

// The OpenBLAS entry points kiln calls, resolved by load_openblas. Written
// once under init_blas's call_once (every CPU backend calls it before its
// first product), read-only after.
struct OpenBlas {
  cblas_sgemm_fn sgemm = nullptr;
  cblas_dgemm_fn dgemm = nullptr;
  openblas_set_num_threads_fn set_num_threads = nullptr;
};
OpenBlas blas;

template <class F> void resolve(void *lib, const char *name, F &fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) fail(KILN_ERROR_BACKEND, std::string("OpenBLAS lacks ") + name);
}

void load_openblas() {
  // A host that set the variable itself asked for OpenBLAS's threads; kiln
  // still runs its products on one (set_num_threads below).
  static const char kVar[] = "OPENBLAS_NUM_THREADS";
  const bool set_here = std::getenv(kVar) == nullptr;
  if (set_here) setenv(kVar, "1", 0);
  // The library the build was linked and tested against first (the pthread
  // variant: Debian's alternatives may point the soname at the serial one),
  // then whatever the soname resolves to.
  void *lib = dlopen(KILN_OPENBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
  std::string first_error = lib ? "" : dlerror();
  if (!lib) lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (set_here) unsetenv(kVar);
  if (!lib) {
    const char *second = dlerror();
    const std::string why = first_error.substr(0, 200) + "; " + std::string(second ? second : "").substr(0, 200);
    // Under an address-space limit a library that does not fit fails to map
    // its segments: the process is out of memory, OpenBLAS is not missing
    // (seen under `ulimit -v 150000` on a 16-core GPU machine).
    rlimit limit{};
    if (why.find("failed to map segment") != std::string::npos && getrlimit(RLIMIT_AS, &limit) == 0 &&
        limit.rlim_cur != RLIM_INFINITY)
      fail(KILN_ERROR_OUT_OF_MEMORY,
           "out of address space: OpenBLAS for the CPU backend does not fit under the process's limit of " +
               std::to_string(limit.rlim_cur >> 20) + " MiB (ulimit -v): " + why);
    fail(KILN_ERROR_BACKEND, "cannot load OpenBLAS for the CPU backend: " + why);
  }
  OpenBlas b;
  resolve(lib, "cblas_sgemm", b.sgemm);
  resolve(lib, "cblas_dgemm", b.dgemm);
  resolve(lib, "openblas_set_num_threads", b.set_num_threads);
  b.set_num_threads(1);
  blas = b;  // the handle is never closed: the functions stay valid until exit
}

// OpenBLAS 0.3.21 maps a work buffer of 128 MiB (its BUFFER_SIZE on x86-64)
// the first time a thread multiplies, and when the mapping fails it retries
// forever: under `ulimit -v` the product never returns. So the first BLAS
// call on each thread checks that the address space has room for one, and a
// failed check is OUT_OF_MEMORY instead of a hang. Another thread can still
// take the room between the check and OpenBLAS's own mapping, but a process
// at its limit fails here, at once.
constexpr size_t kBlasBufferBytes = size_t(129) << 20;

void check_blas_buffer() {
  thread_local bool checked = false;
  if (checked) return;
  void *probe = mmap(nullptr, kBlasBufferBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (probe == MAP_FAILED)
    fail(KILN_ERROR_OUT_OF_MEMORY, "out of address space: OpenBLAS needs a 128 MiB work buffer on each thread that "
                                   "multiplies matrices, and this process cannot map one (ulimit -v?)");
  munmap(probe, kBlasBufferBytes);
  checked = true;
}

template <class S>
struct Blas;

template <>
struct Blas<float> {
  static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, double alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, double beta, float *c, int64_t ldc) {
    check_blas_buffer();
    blas.sgemm(CblasRowMajor, ta, tb, blasint(m), blasint(n), blasint(k), float(alpha), a, blasint(lda), b,
                blasint(ldb), float(beta), c, blasint(ldc));
  }
};

template <>
struct Blas<double> {
  static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, double alpha,
                   const double *a, int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc) {
    check_blas_buffer();
    blas.dgemm(CblasRowMajor, ta, tb, blasint(m), blasint(n), blasint(k), alpha, a, blasint(lda), b, blasint(ldb),
                beta, c, blasint(ldc));
  }
};

std::atomic<F32Products> g_f32_products{F32Products::Auto};

// Whether kiln's AVX-512 f32 kernels may run: the CPU has them, and
// set_f32_products did not rule them out.
bool avx512_f32() {
  return avx512_available() && g_f32_products.load(std::memory_order_relaxed) == F32Products::Auto;
}

// Products up to this many multiply-adds use the register-blocked AVX-512
// kernel where the CPU has it (no packing of A, no per-call setup); larger
// ones the cache-blocked one, whose packing repays itself there.
constexpr int64_t kOwnKernelMax = int64_t(1) << 26;
// Below this many rows of A a transposed B is not worth packing: the pack
// copies all of B to multiply it by a row or two (batch-1 inference), so BLAS
// reads B in place instead, each thread over its own columns.
constexpr int64_t kPackMinRows = 8;

// Whether to pack B before a register-blocked kernel: always when B is
// transposed (the kernel needs contiguous rows); otherwise when A has
// enough rows that the copy is cheap next to the product and B's row stride
// is a multiple of 1 KiB, where the k rows the kernel walks map onto few L1
// sets and evict each other.
bool should_pack_b(bool trans_b, int64_t m, int64_t n) { return trans_b || (m >= 256 && n % 256 == 0); }

// A register-blocked f32 kernel, the packing of B it can read, and the
// width of its blocks of B's columns.
struct RowsKernel {
  decltype(&sgemm_avx512_rows) run;
  decltype(&sgemm_avx512_pack_b) pack_b;
  int64_t block_cols;
};

// Whether kiln's AVX2 kernels may run: the CPU has AVX2 and FMA, and
// set_f32_products did not ask for OpenBLAS alone.
bool avx2_f32() { return avx2_fma_available() && g_f32_products.load(std::memory_order_relaxed) != F32Products::Blas; }

// Without AVX-512, sgemm_avx2_rows takes the products up to kOwnKernelMax
// whose A it reads in place from near caches: C at most kAvx2RowsMaxCols
// wide (A is read once per 16 columns of C, so at most 8 times), or an A of
// at most kAvx2RowsMaxA floats (32 KiB, which stays in the L1 while every
// block of columns reads it). On one Zen 3 thread (kiln_cpu_products_bench
// ... auto,blas, and against the previous choices in alternating runs,
// 2026-11-28): the tutorial's X W1^T (128 x 32 x 784) in 76 to 95 us
// against 96 to 119 on the blocked kernel, its weight gradient (32 x 784 x
// 128) in 78 to 102 against 97 to 119 on OpenBLAS, a classifier's last
// layer (256 x 10 x 1024 and its two gradients) 1.2 to 1.9 times as fast as
// on OpenBLAS, and 1024 x 64 x 784 as fast as the blocked kernel or
// faster. Wider, with a larger A, the blocked kernel is faster (above).
constexpr int64_t kAvx2RowsMaxCols = 128;
constexpr int64_t kAvx2RowsMaxA = 8192;

bool avx2_rows_fit(int64_t m, int64_t n, int64_t k) { return n <= kAvx2RowsMaxCols || m * k <= kAvx2RowsMaxA; }

// The register-blocked kernel that runs this product, or null: on AVX-512
// the products up to kOwnKernelMax, on AVX2 those that avx2_rows_fit;
// never a transposed B under kPackMinRows rows, which BLAS reads in place.
const RowsKernel *rows_kernel(bool trans_b, int64_t m, int64_t n, int64_t k) {
  static constexpr RowsKernel avx512{sgemm_avx512_rows, sgemm_avx512_pack_b, kSgemmBlockCols};
  static constexpr RowsKernel avx2{sgemm_avx2_rows, sgemm_avx2_pack_b, kSgemmAvx2BlockCols};
  if ((trans_b && m < kPackMinRows) || m * n * k > kOwnKernelMax) return nullptr;
  if (avx512_f32()) return &avx512;
  return avx2_f32() && avx2_rows_fit(m, n, k) ? &avx2 : nullptr;
}

// A cache-blocked f32 kernel and how its products split between threads:
// rows at multiples of split_rows, columns at multiples of block_cols.
struct BlockedKernel {
  decltype(&sgemm_avx512_blocked) run;
  int64_t split_rows, block_cols;
};

// Without AVX-512, products from this many multiply-adds that
// sgemm_avx2_rows does not take (avx2_rows_fit) run on the AVX2 blocked
// kernel when C has at least kAvx2BlockedMinRows rows: there its packing
// repays itself. The products of a 784-256-256-10 step at batch 128 took
// 10 to 30% less time on it than on sgemm_avx2_rows (128 x 256 x 784, 256 x
// 784 x 128; one Zen 3 thread, alternating runs).
constexpr int64_t kAvx2BlockedMin = int64_t(1) << 20;
constexpr int64_t kAvx2BlockedMinRows = 64;

// The blocked kernel that runs this f32 product, or null: on AVX-512 the
// products above kOwnKernelMax (a training step of 784-1024-1024-10 is made
// of them), on AVX2 those and the ones above kAvx2BlockedMin with enough
// rows that sgemm_avx2_rows does not take; never a transposed B under
// kPackMinRows rows. On that step's products the AVX-512 kernel matches
// OpenBLAS 0.3.21's SkylakeX kernels to within a few percent either way,
// and beats them split over threads (one panel per thread packs each
// operand once, where BLAS calls per chunk repack); on CPUs newer than the
// OpenBLAS, which then runs pre-AVX-512 kernels, it is several times
// faster. The AVX2 kernel is for the CPUs
// without AVX-512 (sgemm_avx2.hpp).
const BlockedKernel *blocked_kernel(bool trans_b, int64_t m, int64_t n, int64_t k) {
  static constexpr BlockedKernel avx512{sgemm_avx512_blocked, kSgemmSplitRows, kSgemmBlockCols};
  static constexpr BlockedKernel avx2{sgemm_avx2_blocked, kSgemmAvx2SplitRows, kSgemmAvx2BlockCols};
  if (trans_b && m < kPackMinRows) return nullptr;
  const int64_t size = m * n * k;
  if (avx512_f32()) return size > kOwnKernelMax ? &avx512 : nullptr;
  const bool large =
      size > kOwnKernelMax || (size > kAvx2BlockedMin && m >= kAvx2BlockedMinRows && !avx2_rows_fit(m, n, k));
  return large && avx2_f32() ? &avx2 : nullptr;
}

// Steps of k from which a narrow A B^T is worth its dot products' sums.
constexpr int64_t kDotsMinDepth = 128;

// Whether sgemm_avx512_dots runs this product: A B^T with both stored
// row-major along k, at most kSgemmDotsMaxCols columns, deep enough.
bool use_dots(bool trans_a, bool trans_b, int64_t n, int64_t k) {
  return avx512_f32() && !trans_a && trans_b && n <= kSgemmDotsMaxCols && k >= kDotsMinDepth;
}

// C = alpha * op(A) op(B) + beta * C on the blocked kernel, one panel of C
// per thread: each thread packs the blocks of A and B its panel reads, so
// more panels would pack the shared operand more times over. Packed once
// instead, by both threads together before the panels, it made the large
// products of a 784-1024-1024-10 step 1-6% slower on two threads
// (alternating runs), likely because each thread then read half of it from
// the other core's cache.
//
// Row panels are cut in multiples of the kernel's split_rows (4 on
// AVX-512), not of whole tiles (12 rows there): in tiles, the 1024 rows of a
// weight gradient went 516 and 508 to two threads, and the second waited
// for the first; cut evenly, its products ran about 0.8% faster
// (784-1024-1024-10, batch 256, 2 threads, alternating runs).
void blocked_gemm(ThreadPool &pool, const BlockedKernel &kernel, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const float *a, const float *b, float beta, float *c) {
  const int64_t lda = std::max<int64_t>(1, trans_a ? m : k), ldb = std::max<int64_t>(1, trans_b ? k : n);
  auto panel = [&](int64_t i0, int64_t mp, int64_t j0, int64_t np) {
    kernel.run(mp, np, k, alpha, trans_a ? a + i0 : a + i0 * lda, trans_a ? 1 : lda, trans_a ? lda : 1,
               trans_b ? b + j0 * ldb : b + j0, ldb, trans_b, beta, c + i0 * n + j0, n);
  };
  const bool by_rows = m >= n;
  const int64_t unit = by_rows ? kernel.split_rows : kernel.block_cols, extent = by_rows ? m : n;
  pool.parallel_ranges((extent + unit - 1) / unit, pool.size(), [&](int64_t begin, int64_t end) {
    const int64_t lo = begin * unit, hi = std::min(extent, end * unit);
    if (by_rows) {
      panel(lo, hi - lo, 0, n);
    } else {
      panel(0, m, lo, hi - lo);
    }
  });
}

// Runs panel(i0, mp, j0, np) over panels of C [m, n] that cover it, on the
// pool: row panels when m >= n or k is short, else panels of whole column
// blocks (j0 a multiple of kSgemmBlockCols, so packed blocks are never
// split), each about kGemmGrain multiply-adds or more. A product of a few
// steps of k is bound by writing C, and written in column panels each
// thread went down C's rows a strip at a time: on two threads the output
// layer's dY W (256 x 1024 x 10) took 95 us, against 71 on one; in row
// panels, 44.
template <class Panel>
void for_panels(ThreadPool &pool, int64_t m, int64_t n, int64_t k, const Panel &panel) {
  constexpr int64_t NR = kSgemmBlockCols;
  static_assert(kBf16BlockCols == NR && NR % kSgemmAvx2BlockCols == 0, "every kernel's packed blocks are whole");
  if (m >= n || k <= kSgemmShortDepth) {
    const int64_t grain = std::max<int64_t>(1, kGemmGrain / std::max<int64_t>(1, n * k));
    pool.parallel_for(m, grain, [&](int64_t begin, int64_t end) { panel(begin, end - begin, 0, n); });
  } else {
    const int64_t blocks = (n + NR - 1) / NR;
    const int64_t grain = std::max<int64_t>(1, kGemmGrain / std::max<int64_t>(1, m * k * NR));
    pool.parallel_for(blocks, grain, [&](int64_t begin, int64_t end) {
      const int64_t j0 = begin * NR, j1 = std::min(n, end * NR);
      panel(0, m, j0, j1 - j0);
    });
  }
}

// C = alpha * op(A) op(B) + beta * C over panels of C (for_panels), one
// kernel call per panel.
template <class S>
void split_gemm(ThreadPool &pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                const S *a, const S *b, double beta, S *c) {
  const int64_t lda = std::max<int64_t>(1, trans_a ? m : k), ldb = std::max<int64_t>(1, trans_b ? k : n);
  const int64_t ldc = std::max<int64_t>(1, n);
  const RowsKernel *own_kernel = nullptr;
  const S *b_packed = nullptr;
  if constexpr (std::is_same_v<S, float>) {
    if (const BlockedKernel *kernel = blocked_kernel(trans_b, m, n, k)) {
      blocked_gemm(pool, *kernel, trans_a, trans_b, m, n, k, float(alpha), a, b, float(beta), c);
      return;
    }
    if (use_dots(trans_a, trans_b, n, k)) {
      for_panels(pool, m, n, k, [&](int64_t i0, int64_t mp, int64_t j0, int64_t np) {
        sgemm_avx512_dots(mp, np, k, float(alpha), a + i0 * lda, lda, b + j0 * ldb, ldb, float(beta), c + i0 * ldc + j0,
                          ldc);
      });
      return;
    }
    own_kernel = rows_kernel(trans_b, m, n, k);
    if (own_kernel && should_pack_b(trans_b, m, n)) {
      thread_local AlignedBuffer<float> scratch;  // grows to the largest B, then reused
      const int64_t NR = own_kernel->block_cols, blocks = (n + NR - 1) / NR;
      // The caller's buffer: `scratch` names each worker's own.
      float *out = scratch.reserve(blocks * NR * k, "for a packed matrix operand");
      // On the pool too: a training step of 784-1024-1024-10 packs 3 to 4
      // MiB of weights before three of its products, which one thread
      // alone would leave the others waiting for.
      pool.parallel_for(blocks, std::max<int64_t>(1, kPackGrain / (NR * k)), [&](int64_t jb0, int64_t jb1) {
        const int64_t j0 = jb0 * NR, j1 = std::min(n, jb1 * NR);
        own_kernel->pack_b(trans_b ? b + j0 * ldb : b + j0, ldb, trans_b, j1 - j0, k, out + jb0 * NR * k);
      });
      b_packed = out;
    }
  }
  // One panel: rows [i0, i0 + mp) and columns [j0, j0 + np) of C, with j0 a
  // multiple of the kernel's block when B is packed (for_panels cuts at
  // multiples of kSgemmBlockCols, itself one of every kernel's).
  auto panel = [&](int64_t i0, int64_t mp, int64_t j0, int64_t np) {
    const S *ap = trans_a ? a + i0 : a + i0 * k;
    S *cp = c + i0 * ldc + j0;
    if constexpr (std::is_same_v<S, float>) {
      if (own_kernel) {
        const int64_t NR = own_kernel->block_cols;
        if (b_packed) {
          own_kernel->run(mp, np, k, float(alpha), ap, trans_a ? 1 : lda, trans_a ? lda : 1, b_packed + j0 * k, NR,
                          NR * k, float(beta), cp, ldc);
        } else {
          own_kernel->run(mp, np, k, float(alpha), ap, trans_a ? 1 : lda, trans_a ? lda : 1, b + j0, ldb, NR,
                          float(beta), cp, ldc);
        }
        return;
      }
    }
    const S *bp = trans_b ? b + j0 * k : b + j0;
    Blas<S>::gemm(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, mp, np, k, alpha, ap, lda,
                  bp, ldb, beta, cp, ldc);
  };
  for_panels(pool, m, n, k, panel);
}

std::atomic<Bf16Products> g_bf16_products{Bf16Products::Auto};

// bf16 C = alpha * op(A) op(B) + beta * C on the AVX-512 BF16 kernel: op(B)
// packed once into pairs, then the panels.
void bf16_native_gemm(ThreadPool &pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                      const void *a, const void *b, double beta, void *c) {
  thread_local AlignedBuffer<uint32_t> packed;  // grows to the largest B, then reused
  // The caller's buffer: `packed` names each worker's own.
  uint32_t *const bp = packed.reserve(bf16_packed_size(n, k), "for a packed matrix operand");
  bf16_pack_b(static_cast<const uint16_t *>(b), trans_b, n, k, bp);
  const uint16_t *as = static_cast<const uint16_t *>(a);
  uint16_t *cs = static_cast<uint16_t *>(c);
  const int64_t a_row = trans_a ? 1 : k, a_col = trans_a ? m : 1, block = bf16_packed_block(k);
  for_panels(pool, m, n, k, [&](int64_t i0, int64_t mp, int64_t j0, int64_t np) {
    bf16_gemm_avx512_rows(mp, np, k, float(alpha), as + i0 * a_row, a_row, a_col,
                          bp + j0 / kBf16BlockCols * block, float(beta), cs + i0 * n + j0, n);
  });
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

void set_f32_products(F32Products which) { g_f32_products.store(which, std::memory_order_relaxed); }

void set_bf16_products(Bf16Products how) { g_bf16_products.store(how, std::memory_order_relaxed); }

void init_blas() {
  static std::once_flag once;
  std::call_once(once, load_openblas);  // a failure throws, and the next backend tries again
}

void gemm(ThreadPool &pool, const GemmArgs &args) {
  const DType t = args.t;
  const bool trans_a = args.trans_a, trans_b = args.trans_b;
  const int64_t m = args.m, n = args.n, k = args.k;
  const double alpha = args.alpha, beta = args.beta;
  const void *a = args.a, *b = args.b;
  void *c = args.c;
  if (args.math == MathMode::Tf32)
    fail(KILN_ERROR_NOT_SUPPORTED, "tf32 is a CUDA mode (TF32 tensor cores); the CPU computes f32 products exactly");
  if (m <= 0 || n <= 0) return;
  // blasint is 32 bits here: dimensions and leading dimensions must fit.
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
    fail(KILN_ERROR_NOT_SUPPORTED, "matrix product [" + std::to_string(m) + ", " + std::to_string(k) + "] x [" +
                                       std::to_string(k) + ", " + std::to_string(n) +
                                       "] has a dimension beyond the BLAS limit of 2^31 - 1");
  }
  dispatch_float(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    if (k <= 0) {
      scale_c<T>(m * n, beta, c);
    } else if constexpr (T::kIdentity) {
      split_gemm<S>(pool, trans_a, trans_b, m, n, k, alpha, static_cast<const S *>(a), static_cast<const S *>(b),
                    beta, static_cast<S *>(c));
    } else if (T::kType == DType::BF16 && avx512_bf16_available() &&
               g_bf16_products.load(std::memory_order_relaxed) == Bf16Products::Auto) {
      bf16_native_gemm(pool, trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
    } else {
      half_gemm<T>(pool, trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
    }
  });
}

}  // namespace kiln::cpu
