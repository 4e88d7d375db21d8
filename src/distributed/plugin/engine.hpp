// What the plugin's communicators share (src/distributed/plugin): the failure that
// breaks a communicator for good, the timeout, and with NCCL one nonblocking
// GPU communicator with the stream its collectives run on, its creation and
// its collectives polled against the timeout and abort(). MpiCollective (mpi_collective.cpp) and LocalCollective
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

#ifdef KILN_DIST_NCCL
// Every NCCL communicator of the plugin is nonblocking: its creation (which
// waits for every rank to connect), its enqueues and its finalization return
// ncclInProgress at once and are polled (nccl_poll) against the timeout and
// abort(), so a peer that never comes cannot hang the host thread.
inline ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Waits while comm's state is ncclInProgress and returns the state it
// settles in (ncclSuccess or the error), or ncclInProgress when give_up()
// returned true first (the deadline passed or abort() was called: the caller
// then aborts the communicator). Spins briefly, then yields, then sleeps.
template <class GiveUp>
ncclResult_t nccl_poll(ncclComm_t comm, GiveUp give_up) {
  const Clock::time_point start = Clock::now();
  for (;;) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) return rc;
    if (state != ncclInProgress) return state;
    if (give_up()) return ncclInProgress;
    const double waited = seconds_since(start);
    if (waited < 0.001) continue;
    if (waited < 1) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Finalizes comm (flushing what it queued) within timeout seconds, then
// frees it; aborts it instead when that does not settle in time.
inline void nccl_close(ncclComm_t comm, double timeout) {
  const Clock::time_point start = Clock::now();
  ncclResult_t rc = ncclCommFinalize(comm);
  if (rc == ncclInProgress) rc = nccl_poll(comm, [&] { return seconds_since(start) > timeout; });
  if (rc == ncclSuccess) ncclCommDestroy(comm);
  else ncclCommAbort(comm);
}
#endif

class PluginCollective : public Collective {
 public:
  ~PluginCollective() override {
#ifdef KILN_DIST_NCCL
    if (nccl_) {
      if (broken_.empty()) nccl_close(nccl_, timeout_);
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

  // status: COMMUNICATION but for a collective refused before it began
  // (NOT_SUPPORTED); every later call fails with COMMUNICATION.
  [[noreturn]] void break_with(const std::string &why, kiln_status status = KILN_ERROR_COMMUNICATION) {
    broken_ = why + " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
    fail(status, broken_);
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
  // A call on nccl_: on a nonblocking communicator it may return
  // ncclInProgress (creation always does), and is then polled until it
  // settles, the timeout passes or abort() is called; those two abort the
  // communicator and break this one.
  void nccl_call(ncclResult_t rc, const char *what) {
    if (rc == ncclInProgress) {
      const Clock::time_point start = Clock::now();
      rc = nccl_poll(nccl_, [&] { return aborted() || seconds_since(start) > timeout_; });
      if (rc == ncclInProgress) {
        const bool late = !aborted();
        ncclCommAbort(nccl_);
        nccl_ = nullptr;
        if (!late) break_with(std::string(what) + " " + abort_message());
        break_with(std::string(what) + " did not complete within " + std::to_string(timeout_) +
                   " s: a peer rank died, hangs or is not making the same calls (timeout: "
                   "kiln_communicator_set_timeout or KILN_DIST_TIMEOUT)");
      }
    }
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
