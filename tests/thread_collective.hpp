// ThreadCollective: the ranks of a Collective as threads of one process,
// for tests (data_parallel_test, program_test): a real allreduce, broadcast
// and allgather over in-process memory, in place of the MPI and NCCL engines.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/collective.hpp"
#include "core/error.hpp"

namespace kiln {

// Ranks of one process meeting at a barrier: every collective deposits each
// rank's bytes, waits for all, computes from all, and waits again so no rank
// overwrites its slot before the others read it. fail_at > 0 makes rank
// fail_rank throw on its fail_at-th collective, as an engine error would.
struct Hub {
  explicit Hub(int64_t n) : n(n), slots(size_t(n)) {}
  int64_t n;
  std::mutex mutex;
  std::condition_variable cv;
  int64_t arrived = 0;
  uint64_t generation = 0;
  std::vector<std::vector<char>> slots;
  int64_t fail_rank = -1, fail_at = 0;
  std::atomic<int64_t> starts{0};  // allreduce_start calls, over all ranks
};

class ThreadCollective final : public Collective {
 public:
  ThreadCollective(std::shared_ptr<Hub> hub, int64_t rank) : hub_(std::move(hub)), rank_(rank) {}

  int64_t rank() const override { return rank_; }
  int64_t size() const override { return hub_->n; }
  int64_t local_rank() const override { return rank_; }
  std::string describe() const override { return "test threads"; }
  bool supports(Device device) const override { return device.is_cpu(); }
  void set_timeout(double seconds) override { timeout_ = seconds; }
  double timeout() const override { return timeout_; }
  void abort(const std::string &why) override {
    std::lock_guard<std::mutex> lock(hub_->mutex);
    abort_why_ = why;
    aborted_ = true;
    hub_->cv.notify_all();
  }

  void allreduce(Device, DType t, void *buf, int64_t n, bool mean) override {
    std::vector<std::vector<char>> all = exchange(buf, n * dtype_size(t));
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0;
      for (const auto &slot : all) sum += t == DType::F32   ? double(reinterpret_cast<const float *>(slot.data())[i])
                                          : t == DType::F64 ? reinterpret_cast<const double *>(slot.data())[i]
                                                            : double(reinterpret_cast<const int64_t *>(slot.data())[i]);
      if (mean) sum /= double(hub_->n);
      if (t == DType::F32) static_cast<float *>(buf)[i] = float(sum);
      else if (t == DType::F64) static_cast<double *>(buf)[i] = sum;
      else static_cast<int64_t *>(buf)[i] = int64_t(sum);
    }
  }
  // Reduced at once, as the plugin reduces host buffers.
  void allreduce_start(Device device, DType t, void *buf, int64_t n, bool mean, void *) override {
    ++hub_->starts;
    allreduce(device, t, buf, n, mean);
  }
  void allreduce_wait() override {}
  void broadcast(Device, void *buf, int64_t bytes, int64_t root) override {
    std::vector<std::vector<char>> all = exchange(buf, bytes);
    std::memcpy(buf, all[size_t(root)].data(), size_t(bytes));
  }
  void allgather(const void *in, int64_t bytes, void *out) override {
    std::vector<std::vector<char>> all = exchange(in, bytes);
    for (size_t r = 0; r < all.size(); ++r) std::memcpy(static_cast<char *>(out) + r * size_t(bytes), all[r].data(), size_t(bytes));
  }

 private:
  std::vector<std::vector<char>> exchange(const void *mine, int64_t bytes) {
    std::unique_lock<std::mutex> lock(hub_->mutex);
    // Broken for good after a failure or an abort, as the plugin's are.
    if (aborted_) fail(KILN_ERROR_COMMUNICATION, "aborted: " + abort_why_);
    if (rank_ == hub_->fail_rank && ++calls_ >= hub_->fail_at)
      fail(KILN_ERROR_COMMUNICATION, "test: rank " + std::to_string(rank_) + " fails its collective");
    hub_->slots[size_t(rank_)].assign(static_cast<const char *>(mine), static_cast<const char *>(mine) + bytes);
    barrier(lock);
    std::vector<std::vector<char>> all = hub_->slots;
    barrier(lock);
    return all;
  }

  void barrier(std::unique_lock<std::mutex> &lock) {
    const uint64_t gen = hub_->generation;
    if (++hub_->arrived == hub_->n) {
      hub_->arrived = 0;
      ++hub_->generation;
      hub_->cv.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_);
    while (hub_->generation == gen) {
      if (aborted_) fail(KILN_ERROR_COMMUNICATION, "aborted: " + abort_why_);
      if (hub_->cv.wait_until(lock, deadline) == std::cv_status::timeout && hub_->generation == gen)
        fail(KILN_ERROR_COMMUNICATION, "test collective timed out");
    }
  }

  std::shared_ptr<Hub> hub_;
  int64_t rank_;
  double timeout_ = 60;
  int64_t calls_ = 0;
  bool aborted_ = false;  // guarded by hub_->mutex
  std::string abort_why_;
};

}  // namespace kiln
