// Packing, kernel choice and threading of the CPU's inference products; the
// kernels are in packed_linear_x86.cpp. See packed_linear.hpp.
#include "backend/cpu/packed_linear.hpp"

#include <algorithm>
#include <atomic>
#include <string>

#include "backend/cpu/aligned_buffer.hpp"
#include "core/error.hpp"

namespace kiln::cpu {

namespace {

std::atomic<InferenceKernels> g_which{InferenceKernels::Auto};

// Floats of weights per chunk of the packing: tens of microseconds.
constexpr int64_t kPackGrain = int64_t(1) << 16;

// Weights copied into one ISA's blocks, on cache lines.
class CpuPackedLinear final : public PackedLinear {
 public:
  CpuPackedLinear(ThreadPool &pool, const PackedKernels &kernels, const float *w, int64_t out, int64_t in)
      : PackedLinear(DType::F32, out, in, w), kernels_(kernels) {
    const int64_t blocks = (out + kernels.block_cols - 1) / kernels.block_cols;
    const std::string what = "packing a [" + std::to_string(out) + ", " + std::to_string(in) +
                             "] weight matrix for inference";
    float *packed = packed_.reserve(std::max<int64_t>(blocks * kernels.block_cols * in, 1), what.c_str());
    // A few hundred microseconds per MiB of weights on one thread, paid by
    // the first prediction after every change: shared out by blocks.
    const int64_t grain = std::max<int64_t>(1, kPackGrain / (kernels.block_cols * in));
    pool.parallel_for(blocks, grain, [&](int64_t jb0, int64_t jb1) { kernels.pack(w, out, in, packed, jb0, jb1); });
  }

  const PackedKernels &kernels() const { return kernels_; }
  const float *packed() const { return packed_.data(); }

 private:
  const PackedKernels &kernels_;
  AlignedBuffer<float> packed_;
};

const PackedKernels *chosen_kernels() {
  switch (g_which.load(std::memory_order_relaxed)) {
    case InferenceKernels::Generic: return nullptr;
    case InferenceKernels::Avx2: return avx2_packed_kernels();
    case InferenceKernels::Auto: break;
  }
  const PackedKernels *widest = avx512_packed_kernels();
  return widest ? widest : avx2_packed_kernels();
}

// The thread choice's model of one product on one core: the multiply-adds
// the tiles issue at the kernels' rate, plus the weights' bytes from
// memory where they are too big to stay in this core's L2 between calls.
constexpr double kWeightBytesPerNs = 12;         // one core streaming from L3 or DRAM
constexpr int64_t kCachedWeightBytes = 1 << 20;  // below this, the weights stay cached
// Rows per share of a large batch split over threads: each share streams
// all the weights once, a few percent of its FMAs' time at this size, and
// many shares let the threads make up for one the system deschedules.
constexpr int64_t kShareRows = 192;
// A chunk must hold this much work to repay handing it to another thread:
// a worker still spinning from the last product takes it within a
// microsecond, a sleeping one within a few; the caller meanwhile works on
// its own chunks, so a late worker costs at most one chunk's time.
constexpr double kMinChunkNs = 8000;

}  // namespace

void set_inference_kernels(InferenceKernels which) { g_which.store(which, std::memory_order_relaxed); }

std::unique_ptr<PackedLinear> pack_linear(ThreadPool &pool, DType t, const void *w, int64_t out, int64_t in) {
  const PackedKernels *kernels = t == DType::F32 ? chosen_kernels() : nullptr;
  if (!kernels) return nullptr;
  return std::make_unique<CpuPackedLinear>(pool, *kernels, static_cast<const float *>(w), out, in);
}

int64_t packed_chunks(const ThreadPool &pool, const PackedKernels &kernels, int64_t rows, int64_t n, int64_t k) {
  if (pool.size() == 1) return 1;
  const int64_t cols = (n + kernels.block_cols - 1) / kernels.block_cols * kernels.block_cols;
  const int64_t tile_rows = rows >= kernels.tile_rows ? (rows + kernels.tile_rows - 1) / kernels.tile_rows *
                                                            kernels.tile_rows
                                                      : rows;
  const double weight_bytes = double(cols) * double(k) * sizeof(float);
  const double ns = double(tile_rows) * double(cols) * double(k) / kernels.fmas_per_ns +
                    (weight_bytes > kCachedWeightBytes ? weight_bytes / kWeightBytesPerNs : 0.0);
  return std::clamp<int64_t>(int64_t(ns / kMinChunkNs), 1, pool.size());
}

bool linear_packed(ThreadPool &pool, const PackedLinearArgs &args) {
  const auto *w = dynamic_cast<const CpuPackedLinear *>(args.w);
  if (!w) return false;
  const PackedKernels &kernels = w->kernels();
  const int64_t rows = args.rows, n = w->out, k = w->in;
  if (rows <= 0 || n <= 0) return true;
  PackedJob job;
  job.k = k, job.n = n;
  job.a = static_cast<const float *>(args.x), job.lda = k;
  job.packed = w->packed();
  job.bias = static_cast<const float *>(args.bias);
  job.act = args.act, job.alpha = args.alpha, job.threshold = args.threshold;
  job.c = static_cast<float *>(args.y), job.ldc = n;
  const int64_t blocks = (n + kernels.block_cols - 1) / kernels.block_cols;
  const int64_t chunks = packed_chunks(pool, kernels, rows, n, k);
  if (chunks == 1) {
    kernels.product(job, 0, rows, 0, blocks);
    return true;
  }
  // Fewer rows than a tile per thread (a batch of 8): the threads share
  // out the weights' blocks, each streaming its own past all the rows, so
  // the weights are read once in all; two pieces per thread, so that a
  // thread the system deschedules holds back half its share.
  if (rows < chunks * kernels.tile_rows && blocks >= 2) {
    pool.parallel_ranges(blocks, 2 * chunks, [&](int64_t b0, int64_t b1) { kernels.product(job, 0, rows, b0, b1); });
    return true;
  }
  // Otherwise an equal share of the rows per thread, or shares of about
  // kShareRows for a large batch. Each thread's tiles stream all the
  // weights, as many times in all as a column split's tiles stream half of
  // them, but each thread reads only the rows it wrote itself in the layer
  // before, where a column split read every row on every thread, half of
  // them from the other core's cache. 784-1024-1024-10 at batch 32 to 128
  // on two cores of a Zen 5 EPYC, ONNX Runtime's time over kiln's: 1.00 to
  // 1.13 split by columns and 1.06 to 1.16 by rows in some runs; 0.88 to
  // 1.03 against 1.13 to 1.30 in others, where the column split's time grew
  // by a third and the row split's by 5% (a VM's two cores, it seems,
  // sometimes further apart).
  const int64_t shares = rows <= 2 * chunks * kShareRows ? chunks : (rows + kShareRows - 1) / kShareRows;
  pool.parallel_ranges(rows, shares, [&](int64_t r0, int64_t r1) { kernels.product(job, r0, r1, 0, blocks); });
  return true;
}

}  // namespace kiln::cpu
