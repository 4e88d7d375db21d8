// Neural-network kernels: fused bias + activation and its backward, bias
// gradients (alone or in one pass with the activation's backward), the
// three losses (value, gradient and statistics in one pass), dropout, and
// batch assembly. Losses add per-chunk partial sums in chunk order, so
// their statistics do not depend on thread timing.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>

#include "backend/cpu/activation_math.hpp"
#include "backend/cpu/aligned_buffer.hpp"
#include "backend/cpu/dtype_traits.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/softmax_exp.hpp"
#include "backend/cpu/vectorize.hpp"
#include "core/formulas/losses.hpp"
#include "core/rng.hpp"

namespace kiln::cpu {

namespace {

constexpr int64_t kMaxPartials = 64;  // chunks of one loss reduction

// Rows a gather asks the memory for ahead of the one it converts.
constexpr int64_t kGatherAhead = 6;

// Asks for the cache lines of [p, p + bytes) without waiting for them, into
// the L2 (T1): a row's 13 lines, kGatherAhead rows ahead, are more misses
// than the L1 can keep in flight, and asked into the L1 (T0) they stalled
// the gather; into the L2, the tutorial's epoch (784-32-10, one Zen 4 core)
// ran 4% faster.
inline void prefetch_bytes(const void *p, int64_t bytes) {
  const char *c = static_cast<const char *>(p);
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, 0, 2);
  if (bytes > 0) __builtin_prefetch(c + bytes - 1, 0, 2);
}

// Activations whose cost is a few instructions, versus exp/erf/tanh ones that
// cost tens of nanoseconds and so are worth splitting over threads sooner.
bool cheap(UnaryOp op) {
  return op == UnaryOp::Identity || op == UnaryOp::Relu || op == UnaryOp::LeakyRelu || op == UnaryOp::Neg ||
         op == UnaryOp::Abs;
}

// Elements per chunk of an activation, or of its backward, on the pool.
int64_t act_grain(UnaryOp act) { return cheap(act) ? kElementwiseGrain : kElementwiseGrain / 16; }

// A grain for a reduction over n items that yields at most kMaxPartials chunks.
int64_t partial_grain(int64_t n, int64_t grain) {
  return std::max(grain, (n + kMaxPartials - 1) / kMaxPartials);
}

// Runs fn(begin, end) -> {a, b} over chunks of [0, n) and adds the chunks'
// pairs, in chunk order, into stats[0] and stats[1].
template <class F>
void accumulate_stats(ThreadPool &pool, int64_t n, int64_t grain, double *stats, F &&fn) {
  struct Pair { double first = 0, second = 0; };
  Pair parts[kMaxPartials];
  grain = partial_grain(n, grain);
  const int64_t chunks = pool.chunk_count(n, grain);
  pool.parallel_chunks(n, grain, [&](int64_t chunk, int64_t begin, int64_t end) {
    auto [a, b] = fn(begin, end);
    parts[chunk] = {a, b};
  });
  double a = 0, b = 0;
  for (int64_t c = 0; c < chunks; ++c) { a += parts[c].first; b += parts[c].second; }
  if (stats != nullptr) { stats[0] += a; stats[1] += b; }
}

template <class T, class Act, bool kHasBias, bool kHasPre>
void bias_act_rows(int64_t begin, int64_t end, int64_t cols, typename T::Storage *y, const typename T::Storage *bias,
                   typename T::Storage *pre, Act act) {
  using C = typename T::Compute;
  for (int64_t r = begin; r < end; ++r) {
    typename T::Storage *row = y + r * cols;
    typename T::Storage *pre_row = kHasPre ? pre + r * cols : nullptr;
    for (int64_t c = 0; c < cols; ++c) {
      C v = T::load(row[c]);
      if constexpr (kHasBias) v += T::load(bias[c]);
      if constexpr (kHasPre) pre_row[c] = T::store(v);
      row[c] = T::store(act(v));
    }
  }
}

// dx[i] = grad(dy[i], pre[i], y[i]) for i in [begin, end), reading only the
// inputs grad needs (pre or y null where it needs neither).
template <class T, class Grad>
void act_grad_range(int64_t begin, int64_t end, const typename T::Storage *dy, const typename T::Storage *pre,
                    const typename T::Storage *y, typename T::Storage *dx, Grad grad) {
  using C = typename T::Compute;
  if (pre) {
    for (int64_t i = begin; i < end; ++i) dx[i] = T::store(grad(T::load(dy[i]), T::load(pre[i]), C(0)));
  } else if (y) {
    for (int64_t i = begin; i < end; ++i) dx[i] = T::store(grad(T::load(dy[i]), C(0), T::load(y[i])));
  } else {
    for (int64_t i = begin; i < end; ++i) dx[i] = T::store(grad(T::load(dy[i]), C(0), C(0)));
  }
}

// An activation's backward, as typed pointers: the inputs its gradient
// does not read are null (act_grad_reads_pre), and INTERNAL where the one
// it reads is missing.
template <class T>
struct ActGradOperands {
  using S = typename T::Storage;
  const S *dy, *pre, *y;
  S *dx;

  explicit ActGradOperands(const ActBackwardArgs &args) {
    const bool needs_pre = act_grad_reads_pre(args.act), needs_y = !needs_pre && args.act != UnaryOp::Identity;
    if ((needs_pre && args.pre == nullptr) || (needs_y && args.y == nullptr)) {
      fail(KILN_ERROR_INTERNAL,
           needs_pre ? "activation backward needs the pre-activation" : "activation backward needs y");
    }
    dy = static_cast<const S *>(args.dy);
    pre = needs_pre ? static_cast<const S *>(args.pre) : nullptr;
    y = needs_y ? static_cast<const S *>(args.y) : nullptr;
    dx = static_cast<S *>(args.dx);
  }
};

// A bias gradient sums dy's rows in blocks of `rows` rows, each block in
// double from zero, then adds the blocks' sums in block order: the same
// bits on any number of threads and any vector width (each column's sum
// goes down the rows in order), from bias_grad and act_backward_bias_grad
// alike. Blocks of kBiasBlockRows rows (a batch of 256 makes 8, enough for
// two threads' chunks); longer ones where that would make more than
// kMaxBiasBlocks, or more than kBiasPartialBytes of partial sums.
struct BiasBlocks {
  int64_t rows = 0;   // rows per block
  int64_t count = 0;  // blocks, at least 1 (an empty one when dy has no rows)
};
constexpr int64_t kBiasBlockRows = 32, kMaxBiasBlocks = 64, kBiasPartialBytes = int64_t(4) << 20;

BiasBlocks bias_blocks(int64_t rows, int64_t cols) {
  const int64_t most =
      std::clamp<int64_t>(kBiasPartialBytes / (int64_t(sizeof(double)) * cols), 1, kMaxBiasBlocks);
  const int64_t per = std::max(kBiasBlockRows, (rows + most - 1) / most);
  return {per, std::max<int64_t>(1, (rows + per - 1) / per)};
}

// Blocks per chunk of a bias gradient on the pool.
int64_t bias_block_grain(const BiasBlocks &blocks, int64_t cols, int64_t grain) {
  return std::max<int64_t>(1, grain / std::max<int64_t>(1, blocks.rows * cols));
}

// The calling thread's room for the blocks' partial sums, [count, cols]:
// grown to the largest bias gradient seen, then reused.
double *bias_partials(const BiasBlocks &blocks, int64_t cols) {
  thread_local AlignedBuffer<double> partials;
  return partials.reserve(blocks.count * cols, "for a bias gradient's partial sums");
}

// sum[c] += row[c] for the cols columns of one row of dy, in double.
template <class T>
void add_row(int64_t cols, const typename T::Storage *row, double *sum) {
  for (int64_t c = 0; c < cols; ++c) sum[c] += double(T::load(row[c]));
}

// db = beta * db + the blocks' sums (partials[b * cols + c]), added in block
// order; block 0's row of partials is overwritten with the totals.
template <class T>
void add_bias_partials(ThreadPool &pool, const BiasBlocks &blocks, int64_t cols, double *partials, double beta,
                       typename T::Storage *db) {
  using C = typename T::Compute;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / blocks.count);
  pool.parallel_for(cols, grain, [&](int64_t c0, int64_t c1) {
    vectorized([&] {
      for (int64_t b = 1; b < blocks.count; ++b) {
        const double *block = partials + b * cols;
        for (int64_t c = c0; c < c1; ++c) partials[c] += block[c];
      }
      for (int64_t c = c0; c < c1; ++c) {
        // beta = 0 overwrites: whatever db held (NaN included) is ignored.
        const double old = beta == 0 ? 0.0 : beta * double(T::load(db[c]));
        db[c] = T::store(C(old + partials[c]));
      }
    });
  });
}

// db = beta * db + the column sums of the [rows, cols] rows that row(r)
// returns, in BiasBlocks (row(r) may compute its row first), `grain`
// elements or more per chunk on the pool.
template <class T, class Row>
void bias_grad_by_blocks(ThreadPool &pool, int64_t rows, int64_t cols, int64_t grain, double beta,
                         typename T::Storage *db, const Row &row) {
  const BiasBlocks blocks = bias_blocks(rows, cols);
  double *const partials = bias_partials(blocks, cols);
  pool.parallel_for(blocks.count, bias_block_grain(blocks, cols, grain), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double *sum = partials + b * cols;
      const int64_t r1 = std::min(rows, (b + 1) * blocks.rows);
      vectorized([&] {
        std::fill(sum, sum + cols, 0.0);
        for (int64_t r = b * blocks.rows; r < r1; ++r) add_row<T>(cols, row(r), sum);
      });
    }
  });
  add_bias_partials<T>(pool, blocks, cols, partials, beta, db);
}

}  // namespace

void bias_act(ThreadPool &pool, const BiasActArgs &args) {
  const DType t = args.t;
  const int64_t rows = args.rows, cols = args.cols;
  void *y = args.y;
  const void *bias = args.bias;
  const UnaryOp act = args.act;
  const double alpha = args.alpha, threshold = args.threshold;
  void *pre = args.pre;
  if (rows <= 0 || cols <= 0) return;
  const int64_t grain = std::max<int64_t>(1, act_grain(act) / cols);
  dispatch_float(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    S *py = static_cast<S *>(y);
    S *ppre = static_cast<S *>(pre);
    const S *pb = static_cast<const S *>(bias);
    act::with_unary(act, alpha, threshold, [&](auto fn) {
      pool.parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
        vectorized([&] {
          if (pb && ppre) bias_act_rows<T, decltype(fn), true, true>(begin, end, cols, py, pb, ppre, fn);
          else if (pb) bias_act_rows<T, decltype(fn), true, false>(begin, end, cols, py, pb, ppre, fn);
          else if (ppre) bias_act_rows<T, decltype(fn), false, true>(begin, end, cols, py, pb, ppre, fn);
          else bias_act_rows<T, decltype(fn), false, false>(begin, end, cols, py, pb, ppre, fn);
        });
      });
    });
  });
}

void act_backward(ThreadPool &pool, const ActBackwardArgs &args) {
  if (args.n <= 0) return;
  dispatch_float(args.t, [&](auto traits) {
    using T = decltype(traits);
    const ActGradOperands<T> x(args);
    act::with_act_grad(args.act, args.alpha, args.threshold, [&](auto grad) {
      pool.parallel_for(args.n, act_grain(args.act), [&](int64_t begin, int64_t end) {
        vectorized([&] { act_grad_range<T>(begin, end, x.dy, x.pre, x.y, x.dx, grad); });
      });
    });
  });
}

void bias_grad(ThreadPool &pool, const BiasGradArgs &args) {
  if (args.cols <= 0) return;
  dispatch_float(args.t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    const S *dy = static_cast<const S *>(args.dy);
    bias_grad_by_blocks<T>(pool, args.rows, args.cols, kElementwiseGrain, args.beta, static_cast<S *>(args.db),
                           [&](int64_t r) { return dy + r * args.cols; });
  });
}

void act_backward_bias_grad(ThreadPool &pool, const ActBackwardArgs &act, const BiasGradArgs &bias) {
  const int64_t rows = bias.rows, cols = bias.cols;
  if (act.t != bias.t || act.dx != bias.dy || act.n != rows * cols)
    fail(KILN_ERROR_INTERNAL, "act_backward_bias_grad: the bias gradient is not over the activation's dx");
  if (rows <= 0) return bias_grad(pool, bias);  // no dx to compute: db = beta * db
  if (cols <= 0) return;
  dispatch_float(act.t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    const ActGradOperands<T> x(act);
    act::with_act_grad(act.act, act.alpha, act.threshold, [&](auto grad) {
      // Each row of dx computed right before it is summed, from the L1.
      bias_grad_by_blocks<T>(pool, rows, cols, act_grain(act.act), bias.beta, static_cast<S *>(bias.db),
                             [&](int64_t r) {
                               act_grad_range<T>(r * cols, (r + 1) * cols, x.dy, x.pre, x.y, x.dx, grad);
                               return x.dx + r * cols;
                             });
    });
  });
}

// Rows of logits whose maxima one pass of cross_entropy keeps on the stack.
constexpr int64_t kLossRowBlock = 64;

// exp of a logit less its row's maximum (<= 0): softmax_exp.hpp's for
// float, which vectorizes, libm's for double.
inline float shifted_logit_exp(float v) { return exp_nonpositive(v); }
inline double shifted_logit_exp(double v) { return std::exp(v); }

void cross_entropy(ThreadPool &pool, const LossArgs &args) {
  const DType t = args.t;
  const int64_t rows = args.rows, cols = args.cols;
  const void *logits = args.pred;
  const int64_t *labels = static_cast<const int64_t *>(args.target);
  const double grad_scale = args.grad_scale;
  void *dlogits = args.dpred;
  double *stats = args.stats;
  const double smoothing = args.label_smoothing;
  if (rows <= 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    if (labels[r] < 0 || labels[r] >= cols) {
      fail(KILN_ERROR_INVALID_ARGUMENT, "label " + std::to_string(labels[r]) + " at row " + std::to_string(r) +
                                            " is outside the " + std::to_string(cols) + " classes [0, " +
                                            std::to_string(cols) + ")");
    }
  }
  dispatch_float(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    using C = typename T::Compute;
    const S *px = static_cast<const S *>(logits);
    S *pd = static_cast<S *>(dlogits);
    const C scale = C(grad_scale);
    const auto target = formulas::smoothed_target<C>(grad_scale, smoothing, cols);
    const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / (8 * cols));
    accumulate_stats(pool, rows, grain, stats, [&](int64_t begin, int64_t end) {
      double loss = 0, correct = 0;
      // f32 and f64 keep the exponentials in dlogits for the gradient pass,
      // computed for a block of rows at once: one loop over all its
      // elements vectorizes whole (a row of 10 logits fills no vector).
      const bool keep = T::kIdentity && pd;
      vectorized([&] {
        for (int64_t r0 = begin; r0 < end; r0 += kLossRowBlock) {
          const int64_t r1 = std::min(end, r0 + kLossRowBlock);
          C row_max[kLossRowBlock];
          int64_t row_arg[kLossRowBlock];
          for (int64_t r = r0; r < r1; ++r) {
            const S *x = px + r * cols;
            C mx = T::load(x[0]);
            int64_t arg = 0;
            for (int64_t j = 1; j < cols; ++j) {
              const C v = T::load(x[j]);
              if (v > mx) {
                mx = v;
                arg = j;
              }
            }
            row_max[r - r0] = mx, row_arg[r - r0] = arg;
            if (keep) {
              S *d = pd + r * cols;
              for (int64_t j = 0; j < cols; ++j) d[j] = T::store(T::load(x[j]) - mx);
            }
          }
          if (keep) {
            S *d = pd + r0 * cols;
            for (int64_t i = 0; i < (r1 - r0) * cols; ++i) d[i] = T::store(shifted_logit_exp(T::load(d[i])));
          }
          for (int64_t r = r0; r < r1; ++r) {
            const S *x = px + r * cols;
            S *d = pd ? pd + r * cols : nullptr;
            const int64_t label = labels[r];
            const C mx = row_max[r - r0];
            C sum = 0;
            if (keep) {
              for (int64_t j = 0; j < cols; ++j) sum += T::load(d[j]);
            } else {
              for (int64_t j = 0; j < cols; ++j) sum += shifted_logit_exp(T::load(x[j]) - mx);
            }
            double mean_shift = 0;  // read only with label smoothing
            if (smoothing != 0) {
              for (int64_t j = 0; j < cols; ++j) mean_shift += double(T::load(x[j]) - mx);
              mean_shift /= double(cols);
            }
            loss += formulas::cross_entropy_row_loss(sum, C(T::load(x[label])), mx, smoothing, mean_shift);
            correct += row_arg[r - r0] == label ? 1.0 : 0.0;
            if (d) {
              const C factor = scale / sum;
              for (int64_t j = 0; j < cols; ++j) {
                const C e = keep ? T::load(d[j]) : shifted_logit_exp(T::load(x[j]) - mx);
                d[j] = T::store(formulas::cross_entropy_grad(e, factor, j == label, target));
              }
            }
          }
        }
      });
      return std::pair<double, double>(loss, correct);
    });
  });
}

void mse(ThreadPool &pool, const LossArgs &args) {
  const DType t = args.t;
  const int64_t n = args.rows * args.cols;
  const void *pred = args.pred, *target = args.target;
  const double grad_scale = args.grad_scale;
  void *dpred = args.dpred;
  double *stats = args.stats;
  if (n <= 0) return;
  dispatch_float(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    using C = typename T::Compute;
    const S *p = static_cast<const S *>(pred);
    const S *y = static_cast<const S *>(target);
    S *d = static_cast<S *>(dpred);
    const C scale = C(2 * grad_scale);
    accumulate_stats(pool, n, kElementwiseGrain, stats, [&](int64_t begin, int64_t end) {
      double sum = 0;
      for (int64_t i = begin; i < end; ++i) {
        const formulas::LossTerm<C> term = formulas::mse_term(C(T::load(p[i])), C(T::load(y[i])), scale);
        sum += term.loss;
        if (d) d[i] = T::store(term.grad);
      }
      return std::pair<double, double>(sum, 0.0);
    });
  });
}

void bce_with_logits(ThreadPool &pool, const LossArgs &args) {
  const DType t = args.t;
  const int64_t n = args.rows * args.cols;
  const void *logits = args.pred, *target = args.target;
  const double grad_scale = args.grad_scale;
  void *dlogits = args.dpred;
  double *stats = args.stats;
  if (n <= 0) return;
  dispatch_float(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    using C = typename T::Compute;
    const S *px = static_cast<const S *>(logits);
    const S *py = static_cast<const S *>(target);
    S *d = static_cast<S *>(dlogits);
    const C scale = C(grad_scale);
    accumulate_stats(pool, n, kElementwiseGrain / 16, stats, [&](int64_t begin, int64_t end) {
      double sum = 0;
      for (int64_t i = begin; i < end; ++i) {
        const formulas::LossTerm<C> term = formulas::bce_with_logits_term(C(T::load(px[i])), C(T::load(py[i])), scale);
        sum += term.loss;
        if (d) d[i] = T::store(term.grad);
      }
      return std::pair<double, double>(sum, 0.0);
    });
  });
}

void dropout(ThreadPool &pool, const DropoutArgs &args, uint64_t seed) {
  const DType t = args.t;
  const int64_t n = args.n;
  const void *x = args.x;
  void *y = args.y;
  uint8_t *mask = args.mask;
  const double p = args.p;
  if (n <= 0) return;
  const double keep_probability = 1.0 - p;
  dispatch_float(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    using C = typename T::Compute;
    const S *px = static_cast<const S *>(x);
    S *py = static_cast<S *>(y);
    const C scale = C(formulas::dropout_keep_scale(p));
    pool.parallel_for(n, kElementwiseGrain / 4, [&](int64_t begin, int64_t end) {
      vectorized([&] {
        for (int64_t i = begin; i < end; ++i) {
          const bool keep = rng_uniform(seed, uint64_t(i)) < keep_probability;
          if (mask) mask[i] = keep;
          py[i] = keep ? T::store(T::load(px[i]) * scale) : T::store(C(0));
        }
      });
    });
  });
}

void dropout_backward(ThreadPool &pool, const DropoutBackwardArgs &args) {
  const DType t = args.t;
  const int64_t n = args.n;
  const void *dy = args.dy;
  const uint8_t *mask = args.mask;
  const double p = args.p;
  void *dx = args.dx;
  if (n <= 0) return;
  dispatch_float(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    using C = typename T::Compute;
    const S *pdy = static_cast<const S *>(dy);
    S *pdx = static_cast<S *>(dx);
    const C scale = C(formulas::dropout_keep_scale(p));
    pool.parallel_for(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      vectorized([&] {
        for (int64_t i = begin; i < end; ++i) pdx[i] = mask[i] ? T::store(T::load(pdy[i]) * scale) : T::store(C(0));
      });
    });
  });
}

void gather(ThreadPool &pool, const GatherArgs &a, const int64_t *rows) {
  if (a.count <= 0) return;
  if (a.x && a.cols > 0) {
    dispatch_all(a.x_type, [&](auto src_traits) {
      dispatch_float(a.out_x_type, [&](auto out_traits) {
        using I = decltype(src_traits);
        using O = decltype(out_traits);
        using C = typename O::Compute;
        const auto *ps = static_cast<const typename I::Storage *>(a.x);
        auto *po = static_cast<typename O::Storage *>(a.out_x);
        const C scale = C(a.scale), shift = C(a.shift);
        const int64_t cols = a.cols;
        const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / cols);
        const int64_t row_bytes = cols * int64_t(sizeof(*ps));
        pool.parallel_for(a.count, grain, [&](int64_t begin, int64_t end) {
          // The rows of a shuffled batch are scattered over a data set that
          // rarely fits in L2: read one at a time, each waits on memory
          // (about half the step of a small model). Asking for the rows
          // kGatherAhead ahead keeps that many in flight instead.
          for (int64_t r = begin; r < std::min(end, begin + kGatherAhead); ++r)
            prefetch_bytes(ps + rows[r] * cols, row_bytes);
          vectorized([&] {
            for (int64_t r = begin; r < end; ++r) {
              if (r + kGatherAhead < end) prefetch_bytes(ps + rows[r + kGatherAhead] * cols, row_bytes);
              const auto *in = ps + rows[r] * cols;
              auto *o = po + r * cols;
              for (int64_t c = 0; c < cols; ++c) o[c] = O::store(C(I::load(in[c])) * scale + shift);
            }
          });
        });
      });
    });
  }
  if (!a.y) return;
  if (a.y_cols == 0) {  // class labels
    dispatch_integer(a.y_type, [&](auto traits) {
      using T = decltype(traits);
      const auto *ps = static_cast<const typename T::Storage *>(a.y);
      int64_t *out = static_cast<int64_t *>(a.out_y);
      for (int64_t r = 0; r < a.count; ++r) out[r] = int64_t(ps[rows[r]]);
    });
    return;
  }
  GatherArgs targets;  // float targets: the same row copy as the features
  targets.count = a.count;
  targets.x_type = a.y_type, targets.x = a.y, targets.cols = a.y_cols;
  targets.out_x_type = a.out_y_type, targets.out_x = a.out_y;
  gather(pool, targets, rows);
}

}  // namespace kiln::cpu
