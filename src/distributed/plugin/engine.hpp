// What the plugin's communicators share (src/distributed/plugin): the failure that
// breaks a communicator for good, the timeout, and with NCCL one GPU
// communicator with the stream its collectives run on, polled against the
// timeout. MpiCollective (mpi_collective.cpp) and LocalCollective
// (local_collective.cpp) build on it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#ifdef KILN_DIST_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

#include "core/collective.hpp"
#include "core/error.hpp"

namespace kiln::dist {

using Clock = std::chrono::steady_clock;

constexpr double kDefaultTimeout = 600;  // seconds; KILN_DIST_TIMEOUT overrides

inline double timeout_from_env() {
  const char *env = std::getenv("KILN_DIST_TIMEOUT");
  if (!env || !*env) return kDefaultTimeout;
  char *end = nullptr;
  double v = std::strtod(env, &end);
  if (*end != '\0' || !(v > 0))
    fail(KILN_ERROR_INVALID_ARGUMENT, "KILN_DIST_TIMEOUT must be a number of seconds > 0, got \"" +
                                          std::string(env).substr(0, 32) + "\"");
  return v;
}

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class PluginCollective : public Collective {
 public:
  ~PluginCollective() override {
#ifdef KILN_DIST_NCCL
    if (nccl_) {
      if (broken_.empty()) ncclCommDestroy(nccl_);
      else ncclCommAbort(nccl_);  // a collective may still be pending
    }
    if (ready_) cudaEventDestroy(ready_);
    if (stream_) cudaStreamDestroy(stream_);
#endif
  }

  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }
  void set_timeout(double seconds) override { timeout_ = seconds; }
  void abort(const std::string &why) override {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (abort_reason_.empty()) abort_reason_ = why;
    aborted_.store(true, std::memory_order_release);
  }
  double timeout() const override { return timeout_; }
  // Host buffers are reduced to completion by allreduce_start, so only
  // NCCL's may be outstanding.
  void allreduce_wait() override {
    usable();
#ifdef KILN_DIST_NCCL
    if (!started_) return;
    started_ = false;
    nccl_wait("allreduce");
#endif
  }

 protected:
  PluginCollective() : timeout_(timeout_from_env()) {}

  // Every call fails the same way once a collective failed (collective.hpp).
  void usable() {
    if (!broken_.empty()) fail(KILN_ERROR_COMMUNICATION, "the communicator is broken: " + broken_);
    if (aborted()) break_with(abort_message());
  }

  // abort() was called (from any thread): wait loops poll this.
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  std::string abort_message() {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    return "aborted: " + abort_reason_;
  }

  [[noreturn]] void break_with(const std::string &why) {
    broken_ = why + " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
    fail(KILN_ERROR_COMMUNICATION, broken_);
  }

  static void check_mean(DType t, bool mean) {
    check(!mean || t == DType::F32 || t == DType::F64, KILN_ERROR_NOT_SUPPORTED,
          std::string("a mean over ranks needs a float buffer, not ") + dtype_name(t));
  }

#ifdef KILN_DIST_NCCL
  static ncclDataType_t nccl_type(DType t) {
    switch (t) {
      case DType::F32: return ncclFloat32;
      case DType::F64: return ncclFloat64;
      case DType::I64: return ncclInt64;
      case DType::BF16: return ncclBfloat16;
      case DType::F16: return ncclFloat16;
      default: fail(KILN_ERROR_NOT_SUPPORTED, std::string("NCCL collectives do not take ") + dtype_name(t));
    }
  }

  void cuda_call(cudaError_t rc, const char *what) {
    if (rc != cudaSuccess) break_with(std::string(what) + " failed: " + cudaGetErrorString(rc));
  }
  void nccl_call(ncclResult_t rc, const char *what) {
    if (rc != ncclSuccess) break_with(std::string(what) + " failed: " + ncclGetErrorString(rc));
  }

  // Waits for stream_ like the MPI requests are waited for: polled against
  // the deadline; the NCCL communicator is aborted on a timeout (its peers'
  // collectives then fail too) and an asynchronous NCCL error is reported.
  void nccl_wait(const char *what) {
    const Clock::time_point start = Clock::now();
    for (;;) {
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) cuda_call(q, what);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(nccl_, &async);
      if (async != ncclSuccess && async != ncclInProgress) nccl_call(async, what);
      const bool late = seconds_since(start) > timeout_;
      if (late || aborted()) {
        ncclCommAbort(nccl_);
        nccl_ = nullptr;
        break_with(late ? std::string(what) + " on the GPU did not complete within " + std::to_string(timeout_) + " s"
                        : abort_message());
      }
      std::this_thread::yield();
    }
  }

  // In place on nccl_device_'s memory, to completion.
  void nccl_allreduce(DType t, void *buf, int64_t n, bool mean) {
    cuda_call(cudaSetDevice(int(nccl_device_)), "cudaSetDevice");
    nccl_call(ncclAllReduce(buf, buf, size_t(n), nccl_type(t), mean ? ncclAvg : ncclSum, nccl_, stream_),
              "ncclAllReduce");
    nccl_wait("allreduce");
  }

  // Queued on stream_ after the work `producer` (a cudaStream_t, may be
  // null) has queued so far, and not waited for: allreduce_wait does.
  void nccl_allreduce_start(DType t, void *buf, int64_t n, bool mean, void *producer) {
    cuda_call(cudaSetDevice(int(nccl_device_)), "cudaSetDevice");
    if (producer) {
      if (!ready_) cuda_call(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
      cuda_call(cudaEventRecord(ready_, static_cast<cudaStream_t>(producer)), "cudaEventRecord");
      cuda_call(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
    }
    nccl_call(ncclAllReduce(buf, buf, size_t(n), nccl_type(t), mean ? ncclAvg : ncclSum, nccl_, stream_),
              "ncclAllReduce");
    started_ = true;
  }

  void nccl_broadcast(void *buf, int64_t bytes, int64_t root) {
    cuda_call(cudaSetDevice(int(nccl_device_)), "cudaSetDevice");
    nccl_call(ncclBroadcast(buf, buf, size_t(bytes), ncclUint8, int(root), nccl_, stream_), "ncclBroadcast");
    nccl_wait("broadcast");
  }

  void check_nccl_device(Device device) const {
    check(device.index == nccl_device_, KILN_ERROR_INVALID_ARGUMENT,
          "this communicator runs NCCL on cuda:" + std::to_string(nccl_device_) + ", not " + device.str());
  }

  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // orders a started allreduce after its producer's work
  bool started_ = false;         // an allreduce_start not waited for yet
  int64_t nccl_device_ = -1;
#endif

  int64_t rank_ = 0, size_ = 1;
  double timeout_;
  std::string broken_;  // non-empty: the first failure, repeated by every later call
  std::atomic<bool> aborted_{false};
  std::mutex abort_mutex_;  // guards abort_reason_
  std::string abort_reason_;
};

}  // namespace kiln::dist
