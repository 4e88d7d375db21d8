// The narrow step (planning/narrow_step.hpp): a one-hidden-layer MLP's
// forward, cross-entropy and backward as two kernels, where cuBLASLt and
// kiln's loss kernels take about a dozen launches of a few microseconds for
// 20 MFLOP (784-32-10 at batch 128). The CPU reference is the plain sequence
// of kernels the same ops compile to by default (core's run_op):
// test_cuda_fast_path compares the two on the GPU.
//
// narrow_forward_kernel: a block per kNarrowRows rows of the batch. The
// hidden layer (a warp per eighth of the units, its lanes along the input),
// then a warp per row for the logits (a lane per class) and the loss, then a
// thread per unit and row for the hidden gradient. Rows are independent, so nothing
// crosses blocks but the loss sums (one atomic per block, as the loss kernel).
//
// narrow_backward_kernel: the weight and bias gradients are sums over the
// batch, computed in a fixed order with no atomics, so a step's result does
// not depend on the block schedule: blocks [0, tiles) own 32 columns of dW1
// each, then a block per class for dW2's row and db2, then one for db1.
//
// That backward is ceil(in / 32) + classes + 1 blocks, each walking the whole
// batch: 36 blocks for 784-32-10, a fraction of an H100's SMs, and a time that
// grows with the batch. planning/narrow_step.cpp takes any batch, and the path
// is off by default until a GPU has timed it: time it at the tutorial's batch
// of 128 and at a large one (1024 or more) before it is turned on.
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/planning/narrow_step.hpp"
#include "core/formulas/losses.hpp"

namespace kiln::cuda {
namespace {

constexpr int kNarrowRows = 4;                     // batch rows per forward block
constexpr int kWarps = kThreads / kWarp;           // 8
constexpr int kMaxHidden = int(kNarrowMaxHidden);  // 64
constexpr int kMaxClasses = int(kNarrowMaxClasses);
constexpr int kUnitsPerWarp = kMaxHidden / kWarps;  // hidden units per warp, at most
static_assert(kMaxClasses <= kWarp, "a warp holds a row of logits");
static_assert(kNarrowRows <= kWarps, "a warp per row for the loss");

__global__ void narrow_forward_kernel(NarrowStep s) {
  __shared__ float hidden[kNarrowRows][kMaxHidden];
  __shared__ float dlogits[kNarrowRows][kMaxClasses];
  const int64_t r0 = int64_t(blockIdx.x) * kNarrowRows;
  const int here = int(min(int64_t(kNarrowRows), s.rows - r0));
  const int warp = int(threadIdx.x) / kWarp, H = int(s.hidden), C = int(s.classes);

  // h = act(x W1^T + b1), as the product and then bias_act_kernel would.
  // Warp w owns units w, w + 8, ...; its lanes walk the inputs together
  // (coalesced rows of W1 and x), each step loading every row's input once
  // for all of the warp's units, so a lane keeps a dozen loads in flight
  // instead of waiting on one dot product at a time.
  float acc[kNarrowRows][kUnitsPerWarp] = {};
  for (int64_t k = lane(); k < s.in; k += kWarp) {
    float x[kNarrowRows];
#pragma unroll
    for (int r = 0; r < kNarrowRows; ++r) x[r] = r < here ? s.x[(r0 + r) * s.in + k] : 0.0f;
#pragma unroll
    for (int q = 0; q < kUnitsPerWarp; ++q) {
      if (warp + q * kWarps >= H) break;
      const float w = s.w1[int64_t(warp + q * kWarps) * s.in + k];
#pragma unroll
      for (int r = 0; r < kNarrowRows; ++r) acc[r][q] += x[r] * w;
    }
  }
#pragma unroll
  for (int q = 0; q < kUnitsPerWarp; ++q) {
    const int j = warp + q * kWarps;
    if (j >= H) break;
#pragma unroll
    for (int r = 0; r < kNarrowRows; ++r) {
      float v = warp_sum(acc[r][q]);
      if (lane() == 0 && r < here) {
        if (s.b1) v += s.b1[j];
        v = unary_op<float>(s.act, v, s.alpha, s.threshold);
        hidden[r][j] = v;
        s.h[(r0 + r) * H + j] = v;
      }
    }
  }
  __syncthreads();

  // The logits and cross_entropy_kernel's arithmetic, a lane per class: the
  // first maximum (NaN never wins), the sum of exp(x - max), the row's loss
  // and gradient through core/formulas.
  const auto target = formulas::smoothed_target<float>(s.grad_scale, s.smoothing, s.classes);
  double loss = 0, correct = 0, invalid = 0;
  if (warp < here) {
    const int r = warp, c = lane();
    const int64_t row = r0 + r;
    const bool has = c < C;
    float v = 0;
    if (has) {
      for (int j = 0; j < H; ++j) v += hidden[r][j] * s.w2[c * H + j];
      if (s.b2) v += s.b2[c];
      s.logits[row * C + c] = v;
    }
    const int64_t label = s.labels[row];
    const bool valid = label >= 0 && label < C;
    const float x_label = __shfl_sync(0xffffffffu, v, valid ? int(label) : 0);
    float best = __shfl_sync(0xffffffffu, v, 0);
    int best_i = 0;
    if (has && v > best) best = v, best_i = c;
    for (int o = kWarp / 2; o > 0; o /= 2) {
      const float w = __shfl_xor_sync(0xffffffffu, best, o);
      const int i = __shfl_xor_sync(0xffffffffu, best_i, o);
      if (w > best || (w == best && i < best_i)) best = w, best_i = i;
    }
    const float e = has ? exp(v - best) : 0.0f;
    const float sum = warp_sum(e);
    double shifted = s.smoothing != 0 && has ? double(v - best) : 0.0;
    if (s.smoothing != 0) shifted = warp_sum(shifted);
    if (lane() == 0) {
      if (valid) {
        loss += formulas::cross_entropy_row_loss(sum, x_label, best, s.smoothing, shifted / double(C));
        correct += best_i == label;
      } else {
        invalid += 1;
      }
    }
    if (has) {
      const float g = valid ? formulas::cross_entropy_grad(e, float(s.grad_scale) / sum, c == label, target) : 0.0f;
      dlogits[r][c] = g;
      s.dlogits[row * C + c] = g;
    }
  }
  if (s.stats) {  // the same for every thread of the block: each calls it or none
    block_atomic_add(loss, s.stats + 0);
    block_atomic_add(correct, s.stats + 1);
    block_atomic_add(invalid, s.stats + 2);
  }
  __syncthreads();

  // dh = (dlogits W2) * act'(h): the second backward's dx, turned in place
  // into the pre-activation's gradient as the first backward would.
  for (int t = int(threadIdx.x); t < here * H; t += kThreads) {
    const int r = t / H, j = t % H;
    float d = 0;
    for (int c = 0; c < C; ++c) d += dlogits[r][c] * s.w2[c * H + j];
    s.dh[(r0 + r) * H + j] = act_grad(s.act, d, 0.0f, hidden[r][j], s.alpha, s.threshold);
  }
}

// dW1[:, c0 .. c0 + 32) = dh^T x over the whole batch: a lane per column,
// the warps split the hidden units, the rows go through shared memory 32 at
// a time.
__device__ void first_weight_tile(const NarrowStep &s, int64_t c0) {
  __shared__ float xs[kWarp][kWarp + 1];
  __shared__ float ds[kWarp][kMaxHidden];
  const int warp = int(threadIdx.x) / kWarp, H = int(s.hidden);
  const int64_t col = c0 + lane();
  float acc[kMaxHidden / kWarps] = {};
  for (int64_t r0 = 0; r0 < s.rows; r0 += kWarp) {
    const int n = int(min(int64_t(kWarp), s.rows - r0));
    for (int r = warp; r < n; r += kWarps) xs[r][lane()] = col < s.in ? s.x[(r0 + r) * s.in + col] : 0.0f;
    for (int t = int(threadIdx.x); t < n * H; t += kThreads) ds[t / H][t % H] = s.dh[r0 * H + t];
    __syncthreads();
    for (int r = 0; r < n; ++r) {
      const float x = xs[r][lane()];
#pragma unroll
      for (int q = 0; q < kMaxHidden / kWarps; ++q)
        if (warp + q * kWarps < H) acc[q] += ds[r][warp + q * kWarps] * x;
    }
    __syncthreads();  // the tiles are rewritten next
  }
  if (col >= s.in) return;
#pragma unroll
  for (int q = 0; q < kMaxHidden / kWarps; ++q)
    if (warp + q * kWarps < H) s.dw1[int64_t(warp + q * kWarps) * s.in + col] = acc[q];
}

// out[j] = sum_r weight(r) m[r, j] for j < n (weight(r) = w[r * w_stride], or
// 1 without w) and, when wsum is not null, *wsum = sum_r weight(r): the
// warps split the rows, a lane per column (two for n > 32); partial sums in
// double meet in shared memory in warp order.
__device__ void weighted_column_sums(int64_t rows, const float *m, int n, const float *w, int64_t w_stride,
                                     float *out, float *wsum) {
  __shared__ double part[kWarps][kMaxHidden];
  __shared__ double weight_part[kWarps];
  const int warp = int(threadIdx.x) / kWarp;
  double a0 = 0, a1 = 0, ws = 0;
  for (int64_t r = warp; r < rows; r += kWarps) {
    const double wr = w ? double(w[r * w_stride]) : 1.0;
    if (lane() < n) a0 += wr * double(m[r * n + lane()]);
    if (lane() + kWarp < n) a1 += wr * double(m[r * n + lane() + kWarp]);
    ws += wr;
  }
  part[warp][lane()] = a0;
  part[warp][lane() + kWarp] = a1;
  if (lane() == 0) weight_part[warp] = ws;
  __syncthreads();
  if (warp != 0) return;
  for (int j = lane(); j < n; j += kWarp) {
    double t = 0;
    for (int k = 0; k < kWarps; ++k) t += part[k][j];
    out[j] = float(t);
  }
  if (wsum && lane() == 0) {
    double t = 0;
    for (int k = 0; k < kWarps; ++k) t += weight_part[k];
    *wsum = float(t);
  }
}

__global__ void narrow_backward_kernel(NarrowStep s) {
  const int64_t tiles = (s.in + kWarp - 1) / kWarp, block = blockIdx.x;
  if (block < tiles) {
    first_weight_tile(s, block * kWarp);
  } else if (block < tiles + s.classes) {  // dW2[c, :] = dlogits[:, c]^T h, db2[c] = sum of dlogits[:, c]
    const int64_t c = block - tiles;
    weighted_column_sums(s.rows, s.h, int(s.hidden), s.dlogits + c, s.classes, s.dw2 + c * s.hidden,
                         s.db2 ? s.db2 + c : nullptr);
  } else if (s.db1) {  // db1 = column sums of dh
    weighted_column_sums(s.rows, s.dh, int(s.hidden), nullptr, 0, s.db1, nullptr);
  }
}

}  // namespace

void narrow_step(const Launch &L, const NarrowStep &s) {
  if (s.rows <= 0) return;
  narrow_forward_kernel<<<unsigned((s.rows + kNarrowRows - 1) / kNarrowRows), kThreads, 0, L.stream>>>(s);
  KILN_CUDA_LAUNCHED("narrow_forward");
  const int64_t tiles = (s.in + kWarp - 1) / kWarp;
  narrow_backward_kernel<<<unsigned(tiles + s.classes + 1), kThreads, 0, L.stream>>>(s);
  KILN_CUDA_LAUNCHED("narrow_backward");
}

}  // namespace kiln::cuda
