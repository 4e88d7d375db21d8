// See gradient_reduce.hpp.
#include "train/gradient_reduce.hpp"

#include <algorithm>
#include <utility>

namespace kiln {

namespace {

// The element range [lo, hi) of work_grads that a LinearBackwardOp's weight
// and bias gradients span (Model aligns each parameter, so padding may lie
// between them), or {-1, -1} when that is not inside the buffer.
std::pair<int64_t, int64_t> written_range(const LinearBackwardOp &op, const GradientBuffers &g) {
  const int64_t esize = dtype_size(g.work);
  const char *base = static_cast<const char *>(g.work_grads);
  const int64_t w = (static_cast<const char *>(op.dw) - base) / esize;
  int64_t lo = w, hi = w + op.out * op.in;
  if (op.db) {
    const int64_t b = (static_cast<const char *>(op.db) - base) / esize;
    lo = std::min(lo, b), hi = std::max(hi, b + op.out);
  }
  if (lo < 0 || hi > g.n) return {-1, -1};
  return {lo, hi};
}

// Where each bucket ends: after op index `after` (relative to
// backward_begin), the range [lo, hi) is complete.
struct Bucket {
  size_t after;
  int64_t lo, hi;
};

std::vector<Bucket> plan_buckets(const std::vector<StepOp> &ops, size_t backward_begin, const GradientBuffers &g,
                                 int64_t bucket_bytes) {
  std::vector<Bucket> buckets;
  const int64_t esize = dtype_size(g.t);
  int64_t written_lo = g.n;  // [written_lo, n) is written so far
  int64_t pending_hi = g.n;  // [written_lo, pending_hi) is written and not in a bucket yet
  for (size_t i = backward_begin; bucket_bytes > 0 && i < ops.size(); ++i) {
    const auto *op = std::get_if<LinearBackwardOp>(&ops[i]);
    if (!op) continue;
    const auto range = written_range(*op, g);
    // Below what is written (padding between is written by no op), or the
    // layout is not one growing tail: one bucket after the backward.
    if (range.first < 0 || range.second > written_lo) return {};
    written_lo = range.first;
    if ((pending_hi - written_lo) * esize >= bucket_bytes) {
      buckets.push_back({i - backward_begin, written_lo, pending_hi});
      pending_hi = written_lo;
    }
  }
  return buckets;
}

void append_bucket(std::vector<StepOp> &out, const GradientBuffers &g, Collective *comm, int64_t lo, int64_t hi) {
  const int64_t esize = dtype_size(g.t);
  if (g.work != g.t) {
    CastOp cast;
    cast.args.from = g.work, cast.args.to = g.t;
    cast.args.n = hi - lo;
    cast.args.in = static_cast<const char *>(g.work_grads) + lo * dtype_size(g.work);
    cast.args.out = static_cast<char *>(g.grads) + lo * esize;
    out.push_back(cast);
  }
  if (comm) {
    AllReduceStartOp reduce;
    reduce.t = g.t;
    reduce.n = hi - lo;
    reduce.buf = static_cast<char *>(g.grads) + lo * esize;
    reduce.mean = true;
    reduce.comm = comm;
    out.push_back(reduce);
  }
}

}  // namespace

int64_t finish_gradients(std::vector<StepOp> &ops, size_t backward_begin, const GradientBuffers &g, Collective *comm,
                         int64_t bucket_bytes) {
  const std::vector<Bucket> buckets = plan_buckets(ops, backward_begin, g, comm ? bucket_bytes : 0);
  std::vector<StepOp> backward(ops.begin() + long(backward_begin), ops.end());
  ops.resize(backward_begin);
  size_t next = 0;
  int64_t pending_hi = g.n;
  for (size_t i = 0; i < backward.size(); ++i) {
    ops.push_back(std::move(backward[i]));
    if (next < buckets.size() && buckets[next].after == i) {
      append_bucket(ops, g, comm, buckets[next].lo, buckets[next].hi);
      pending_hi = buckets[next].lo;
      ++next;
    }
  }
  // The rest, the layers below the last full bucket and any frozen ones.
  if (pending_hi > 0) append_bucket(ops, g, comm, 0, pending_hi);
  if (!comm) return 0;
  ops.push_back(AllReduceWaitOp{comm});
  return int64_t(buckets.size()) + (pending_hi > 0 ? 1 : 0);
}

}  // namespace kiln
