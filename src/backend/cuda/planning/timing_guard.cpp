// See timing_guard.hpp.
#include "backend/cuda/planning/timing_guard.hpp"

#include <algorithm>

#include "core/dtype.hpp"

namespace kiln::cuda {
namespace {

void add(std::vector<TimedBuffer> &list, const void *data, int64_t bytes, bool fill) {
  if (!data || bytes <= 0) return;
  for (TimedBuffer &b : list) {
    if (b.data != data) continue;
    b.bytes = std::max(b.bytes, bytes);
    b.fill = b.fill || fill;
    return;
  }
  list.push_back({const_cast<void *>(data), bytes, fill});
}

}  // namespace

std::vector<TimedBuffer> timed_buffers(const LinearOp &op) {
  const int64_t e = dtype_size(op.t);
  std::vector<TimedBuffer> list;
  add(list, op.x, op.rows * op.in * e, true);
  add(list, op.y, op.rows * op.out * e, false);
  add(list, op.pre, op.rows * op.out * e, false);
  return list;
}

std::vector<TimedBuffer> timed_buffers(const LinearBackwardOp &op) {
  const int64_t e = dtype_size(op.t);
  std::vector<TimedBuffer> list;
  add(list, op.dy, op.rows * op.out * e, true);  // and rewritten in place by the activation's gradient
  add(list, op.x, op.rows * op.in * e, true);
  add(list, op.y, op.rows * op.out * e, true);
  add(list, op.pre, op.rows * op.out * e, true);
  add(list, op.dw, op.out * op.in * e, false);
  add(list, op.db, op.out * e, false);
  add(list, op.dx, op.rows * op.in * e, false);
  return list;
}

TimingGuard::TimingGuard(TimingMemory &memory, std::vector<TimedBuffer> buffers)
    : memory_(memory), buffers_(std::move(buffers)) {
  try {
    // Every copy is taken before anything is filled, so buffers that
    // overlap are put back as they were, in any order.
    for (const TimedBuffer &b : buffers_) {
      void *copy = memory_.alloc(b.bytes);
      try {
        memory_.copy(copy, b.data, b.bytes);
      } catch (...) {
        memory_.release(copy);
        throw;
      }
      copies_.push_back(copy);
    }
    for (const TimedBuffer &b : buffers_)
      if (b.fill) memory_.fill(b.data, b.bytes);
  } catch (...) {
    try {
      put_back();  // a fill may have started (copies_ holds only complete copies)
    } catch (...) {
    }
    release_copies();
    throw;
  }
}

TimingGuard::~TimingGuard() {
  if (!restored_) {
    try {
      put_back();
    } catch (...) {
    }
  }
  release_copies();
}

void TimingGuard::restore() {
  restored_ = true;
  put_back();
  release_copies();
}

void TimingGuard::put_back() {
  for (size_t i = 0; i < copies_.size(); ++i) memory_.copy(buffers_[i].data, copies_[i], buffers_[i].bytes);
}

void TimingGuard::release_copies() noexcept {
  for (void *c : copies_) memory_.release(c);
  copies_.clear();
}

}  // namespace kiln::cuda
