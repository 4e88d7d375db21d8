// Reductions (sum, mean, max, argmax) and softmax over the middle dimension
// of [outer, n, inner]. With inner == 1 each output reads one contiguous row;
// otherwise outputs are processed in blocks of kBlock neighbouring columns so
// that every read is contiguous. Float sums accumulate in double.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cpu/dtype_traits.hpp"
#include "backend/cpu/kernels.hpp"

namespace kiln::cpu {

namespace {

constexpr int64_t kBlock = 64;       // columns per block when inner > 1
constexpr int64_t kMaxPartials = 64;  // chunks of a single long reduction

// Whether v replaces best as the maximum: a NaN beats everything (and then
// stays), otherwise strictly greater, so ties keep the first index.
template <class C>
inline bool beats(C v, C best) {
  if constexpr (std::is_floating_point_v<C>) {
    if (v != v) return best == best;
  }
  return v > best;
}

template <class T>
struct Reducer {
  using S = typename T::Storage;
  using C = typename T::Compute;
  // Float sums in double; integer sums wrap in 64 bits.
  using Acc = std::conditional_t<std::is_floating_point_v<C>, double, uint64_t>;

  static Acc to_acc(C v) {
    if constexpr (std::is_floating_point_v<C>) return double(v); else return uint64_t(int64_t(v));
  }

  // Sum of p[0..n) with four independent accumulators (latency, not order).
  static Acc sum_row(const S *p, int64_t n) {
    Acc s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      s0 += to_acc(T::load(p[i]));
      s1 += to_acc(T::load(p[i + 1]));
      s2 += to_acc(T::load(p[i + 2]));
      s3 += to_acc(T::load(p[i + 3]));
    }
    for (; i < n; ++i) s0 += to_acc(T::load(p[i]));
    return (s0 + s1) + (s2 + s3);
  }

  // Index of the first maximum of p[0..n), n > 0.
  static int64_t argmax_row(const S *p, int64_t n, C *best_value) {
    C best = T::load(p[0]);
    int64_t best_index = 0;
    for (int64_t i = 1; i < n; ++i) {
      C v = T::load(p[i]);
      if (beats(v, best)) { best = v; best_index = i; }
    }
    *best_value = best;
    return best_index;
  }

  // The sum of n elements as the output dtype: Mean divides (NaN for n = 0
  // on floats, 0 on integers, whose mean truncates).
  static S finish_sum(Acc sum, int64_t n, bool mean) {
    if constexpr (std::is_floating_point_v<C>) {
      return T::store(C(mean ? sum / double(n) : sum));
    } else {
      int64_t total = int64_t(sum);
      if (mean) total = n > 0 ? total / n : 0;
      return S(total);
    }
  }

  static void run(ThreadPool &pool, ReduceOp op, int64_t outer, int64_t n, int64_t inner, const S *in, void *out) {
    const bool mean = op == ReduceOp::Mean;
    S *o = static_cast<S *>(out);
    int64_t *oi = static_cast<int64_t *>(out);
    if (inner == 1 && outer == 1) {
      single_row(pool, op, n, in, o, oi);
      return;
    }
    if (inner == 1) {
      const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n, 1));
      pool.parallel_for(outer, grain, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const S *row = in + r * n;
          C best;
          switch (op) {
            case ReduceOp::Sum: case ReduceOp::Mean: o[r] = finish_sum(sum_row(row, n), n, mean); break;
            case ReduceOp::Max: argmax_row(row, n, &best); o[r] = T::store(best); break;
            case ReduceOp::Argmax: oi[r] = argmax_row(row, n, &best); break;
          }
        }
      });
      return;
    }
    // Blocks of columns: task = (outer index, block index).
    const int64_t blocks = (inner + kBlock - 1) / kBlock;
    const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n * kBlock, 1));
    pool.parallel_for(outer * blocks, grain, [&](int64_t begin, int64_t end) {
      Acc sum[kBlock];
      C best[kBlock];
      int64_t best_index[kBlock];
      for (int64_t task = begin; task < end; ++task) {
        const int64_t r = task / blocks, c0 = (task % blocks) * kBlock, w = std::min(kBlock, inner - c0);
        const S *base = in + r * n * inner + c0;
        const int64_t out_base = r * inner + c0;
        if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
          std::fill(sum, sum + w, Acc(0));
          for (int64_t j = 0; j < n; ++j) {
            const S *row = base + j * inner;
            for (int64_t c = 0; c < w; ++c) sum[c] += to_acc(T::load(row[c]));
          }
          for (int64_t c = 0; c < w; ++c) o[out_base + c] = finish_sum(sum[c], n, mean);
        } else {
          for (int64_t c = 0; c < w; ++c) { best[c] = T::load(base[c]); best_index[c] = 0; }
          for (int64_t j = 1; j < n; ++j) {
            const S *row = base + j * inner;
            for (int64_t c = 0; c < w; ++c) {
              C v = T::load(row[c]);
              if (beats(v, best[c])) { best[c] = v; best_index[c] = j; }
            }
          }
          for (int64_t c = 0; c < w; ++c) {
            if (op == ReduceOp::Max) o[out_base + c] = T::store(best[c]); else oi[out_base + c] = best_index[c];
          }
        }
      }
    });
  }

  // One long row: per-chunk partial results combined in chunk order, so the
  // result does not depend on thread timing.
  static void single_row(ThreadPool &pool, ReduceOp op, int64_t n, const S *in, S *o, int64_t *oi) {
    const int64_t grain = std::max(kElementwiseGrain, (n + kMaxPartials - 1) / kMaxPartials);
    const int64_t chunks = pool.chunk_count(n, grain);
    Acc sums[kMaxPartials] = {};  // stays 0 when n == 0 runs no chunk
    C bests[kMaxPartials];
    int64_t indices[kMaxPartials];
    pool.parallel_chunks(n, grain, [&](int64_t chunk, int64_t begin, int64_t end) {
      if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
        sums[chunk] = sum_row(in + begin, end - begin);
      } else {
        indices[chunk] = begin + argmax_row(in + begin, end - begin, &bests[chunk]);
      }
    });
    if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
      Acc total = 0;
      for (int64_t c = 0; c < chunks; ++c) total += sums[c];
      o[0] = finish_sum(total, n, op == ReduceOp::Mean);
      return;
    }
    C best = bests[0];
    int64_t best_index = indices[0];
    for (int64_t c = 1; c < chunks; ++c) {
      if (beats(bests[c], best)) { best = bests[c]; best_index = indices[c]; }
    }
    if (op == ReduceOp::Max) o[0] = T::store(best); else oi[0] = best_index;
  }
};

template <class T>
struct Softmax {
  using S = typename T::Storage;
  using C = typename T::Compute;

  static void row(const S *in, S *out, int64_t n, bool log) {
    C mx = T::load(in[0]);
    for (int64_t i = 1; i < n; ++i) mx = std::max(mx, T::load(in[i]));
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += double(std::exp(T::load(in[i]) - mx));
    if (log) {
      // (x - mx) first: it is exact near the maximum, where mx + log(sum)
      // would round at the inputs' magnitude.
      const C lse = C(std::log(sum));
      for (int64_t i = 0; i < n; ++i) out[i] = T::store(T::load(in[i]) - mx - lse);
    } else {
      const C inv = C(1.0 / sum);
      for (int64_t i = 0; i < n; ++i) out[i] = T::store(std::exp(T::load(in[i]) - mx) * inv);
    }
  }

  // Columns [0, w) of a [n, inner] slab, w <= kBlock.
  static void block(const S *in, S *out, int64_t n, int64_t inner, int64_t w, bool log) {
    C mx[kBlock];
    double sum[kBlock];
    for (int64_t c = 0; c < w; ++c) { mx[c] = T::load(in[c]); sum[c] = 0; }
    for (int64_t j = 1; j < n; ++j)
      for (int64_t c = 0; c < w; ++c) mx[c] = std::max(mx[c], T::load(in[j * inner + c]));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < w; ++c) sum[c] += double(std::exp(T::load(in[j * inner + c]) - mx[c]));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t c = 0; c < w; ++c) {
        const C x = T::load(in[j * inner + c]);
        out[j * inner + c] = T::store(log ? x - mx[c] - C(std::log(sum[c])) : C(std::exp(x - mx[c]) / sum[c]));
      }
    }
  }

  static void run(ThreadPool &pool, int64_t outer, int64_t n, int64_t inner, const S *in, S *out, bool log) {
    if (n <= 0) return;
    if (inner == 1) {
      const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / (4 * n));
      pool.parallel_for(outer, grain, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) row(in + r * n, out + r * n, n, log);
      });
      return;
    }
    const int64_t blocks = (inner + kBlock - 1) / kBlock;
    const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / (4 * n * kBlock));
    pool.parallel_for(outer * blocks, grain, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t r = task / blocks, c0 = (task % blocks) * kBlock;
        const int64_t offset = r * n * inner + c0;
        block(in + offset, out + offset, n, inner, std::min(kBlock, inner - c0), log);
      }
    });
  }
};

}  // namespace

void reduce(ThreadPool &pool, const ReduceArgs &args) {
  const ReduceOp op = args.op;
  const DType t = args.t;
  const int64_t outer = args.outer, n = args.n, inner = args.inner;
  const void *in = args.in;
  void *out = args.out;
  if (outer <= 0 || inner <= 0) return;
  if ((op == ReduceOp::Max || op == ReduceOp::Argmax) && n <= 0) {
    fail(KILN_ERROR_INVALID_ARGUMENT, "cannot take the maximum of an empty dimension");
  }
  dispatch_all(t, [&](auto traits) {
    using T = decltype(traits);
    Reducer<T>::run(pool, op, outer, n, inner, static_cast<const typename T::Storage *>(in), out);
  });
}

void softmax(ThreadPool &pool, const SoftmaxArgs &args) {
  const DType t = args.t;
  const int64_t outer = args.outer, n = args.n, inner = args.inner;
  const void *in = args.in;
  void *out = args.out;
  const bool log = args.log;
  if (outer <= 0 || inner <= 0) return;
  dispatch_float(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    Softmax<T>::run(pool, outer, n, inner, static_cast<const S *>(in), static_cast<S *>(out), log);
  });
}

}  // namespace kiln::cpu
