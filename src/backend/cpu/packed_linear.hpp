// The CPU's inference products (Backend::pack_linear and linear_packed):
// f32 weights packed once into column blocks, and one kernel call per
// thread that computes act(x W^T + b) tile by tile with the bias and the
// activation applied while the tile is in registers or L1. Tiles of up to
// 10 rows (AVX-512) or 6 (AVX2) read their rows of the input in place and
// stream the weights once each, so a batch of up to 10 (or 6) reads them
// once per call, at close to the bandwidth floor (packed_linear_kernels.inc
// says why not a BLAS's blocking). The thread count is chosen per product
// from an estimate of its single-thread time (see packed_linear.cpp), and
// nothing is allocated per call.
//
// Kernels exist for AVX-512 and for AVX2 with FMA, chosen at run time;
// elsewhere, and for f64, pack_linear returns null and the backend keeps
// the default (gemm then bias_act on W itself).
#pragma once

#include <cstdint>
#include <memory>

#include "core/backend.hpp"
#include "core/thread_pool.hpp"

namespace kiln::cpu {

// What one call of a kernel multiplies: C [rows, n] = act(A W^T + b) for A
// [rows, k] (row stride lda) and the packed W; bias may be null.
struct PackedJob {
  int64_t k = 0, n = 0;
  const float *a = nullptr;
  int64_t lda = 0;
  const float *packed = nullptr;
  const float *bias = nullptr;
  UnaryOp act = UnaryOp::Identity;
  double alpha = 0, threshold = 0;
  float *c = nullptr;
  int64_t ldc = 0;
};

// One ISA's kernels (packed_linear_x86.cpp).
struct PackedKernels {
  const char *name;      // "avx512", "avx2"
  int64_t block_cols;    // columns per packed block
  int64_t tile_rows;     // most rows of a tile
  double fmas_per_ns;    // a conservative single-core rate, for the thread choice
  // Blocks [jb0, jb1) of W [out, in] into `packed`, which holds every block
  // (ceil(out / block_cols) * block_cols * in floats).
  void (*pack)(const float *w, int64_t out, int64_t in, float *packed, int64_t jb0, int64_t jb1);
  // Rows [i_begin, i_end) of C over column blocks [jb_begin, jb_end).
  void (*product)(const PackedJob &job, int64_t i_begin, int64_t i_end, int64_t jb_begin, int64_t jb_end);
};

// The kernels of each ISA when this CPU runs them, else null.
const PackedKernels *avx512_packed_kernels();
const PackedKernels *avx2_packed_kernels();

// Which kernels pack_linear picks, process-wide: Auto (the default) the
// widest this CPU runs; Avx2 never AVX-512; Generic none (the default
// path), so a test can compare every path on one CPU.
enum class InferenceKernels { Auto, Avx2, Generic };
void set_inference_kernels(InferenceKernels which);

// Packed f32 weights (packed on the pool), or null where the CPU keeps the
// default path (f64, no AVX2, Generic). Throws OUT_OF_MEMORY.
std::unique_ptr<PackedLinear> pack_linear(ThreadPool &pool, DType t, const void *w, int64_t out, int64_t in);
// Runs args when args.w came from pack_linear above and returns true;
// returns false (doing nothing) for any other PackedLinear.
bool linear_packed(ThreadPool &pool, const PackedLinearArgs &args);
// The chunks linear_packed splits a product of `rows` rows into on `pool`:
// 1 below about 16 microseconds of estimated single-thread work (a hand-off
// would cost more than it saves), else up to one per thread.
int64_t packed_chunks(const ThreadPool &pool, const PackedKernels &kernels, int64_t rows, int64_t n, int64_t k);

}  // namespace kiln::cpu
