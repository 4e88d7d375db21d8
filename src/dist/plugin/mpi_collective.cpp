// libkiln_dist.so: kiln::Collective over Open MPI, and over NCCL for CUDA
// buffers when built with KILN_DIST_NCCL (see src/dist/plugin.hpp).
//
// Why nonblocking collectives polled against a deadline, and not MPI's
// blocking calls: a blocking collective whose peer died or hangs may never
// return, and a training job must fail with a status within a bounded time
// instead. The communicator sets MPI_ERRORS_RETURN so an engine error comes
// back as a code, not an abort of the whole process. What Open MPI does when
// a peer exits is up to mpirun: by default it terminates the whole job
// (bounded too); under `mpirun --enable-recovery` the job keeps running and
// the survivors' collectives time out here (tests/dist_test.c checks that).
#include <mpi.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#ifdef KILN_DIST_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

#include "core/error.hpp"
#include "dist/plugin.hpp"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kDefaultTimeout = 600;  // seconds; KILN_DIST_TIMEOUT overrides

// Whether a collective was left pending after a timeout: then MPI_Finalize,
// which may wait for it, is skipped at exit. The finalizer is registered only
// when kiln initialized MPI; a host program that did finalizes it itself.
std::mutex g_mutex;
bool g_pending_left = false;

void finalize_at_exit() {
  std::lock_guard<std::mutex> lock(g_mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !g_pending_left) MPI_Finalize();
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, size_t(len));
}

double timeout_from_env() {
  const char *env = std::getenv("KILN_DIST_TIMEOUT");
  if (!env || !*env) return kDefaultTimeout;
  char *end = nullptr;
  double v = std::strtod(env, &end);
  if (*end != '\0' || !(v > 0))
    fail(KILN_ERROR_INVALID_ARGUMENT, "KILN_DIST_TIMEOUT must be a number of seconds > 0, got \"" +
                                          std::string(env).substr(0, 32) + "\"");
  return v;
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I64: return MPI_INT64_T;
    default:
      fail(KILN_ERROR_NOT_SUPPORTED,
           std::string("collectives over MPI take f32, f64 or i64 buffers, not ") + dtype_name(t));
  }
}

class MpiCollective final : public Collective {
 public:
  MpiCollective() : timeout_(timeout_from_env()) {
    std::unique_lock<std::mutex> lock(g_mutex);  // two threads must not both initialize MPI
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      // SERIALIZED: kiln calls MPI from whichever thread drives a trainer, one
      // at a time per communicator.
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      if (rc != MPI_SUCCESS) fail(KILN_ERROR_DEVICE_UNAVAILABLE, "MPI_Init_thread failed: " + mpi_error(rc));
      std::atexit(finalize_at_exit);  // the plugin is loaded RTLD_NODELETE, so this stays mapped
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    check(!finalized, KILN_ERROR_DEVICE_UNAVAILABLE, "MPI was already finalized in this process");
    lock.unlock();
    // Blocking, without the timeout: they run once, when every rank starts.
    call(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    int rank = 0, size = 0;
    MPI_Comm_rank(comm_, &rank);
    MPI_Comm_size(comm_, &size);
    rank_ = rank, size_ = size;
    MPI_Comm node;
    call(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
    MPI_Comm_rank(node, &rank);
    local_rank_ = rank;
    MPI_Comm_free(&node);
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    MPI_Get_library_version(version, &len);
    library_ = std::string(version, size_t(len));
    library_ = library_.substr(0, library_.find_first_of(",\n"));
  }

  ~MpiCollective() override {
#ifdef KILN_DIST_NCCL
    if (nccl_) {
      if (broken_.empty()) ncclCommDestroy(nccl_);
      else ncclCommAbort(nccl_);
    }
    if (stream_) cudaStreamDestroy(stream_);
#endif
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && broken_.empty()) MPI_Comm_free(&comm_);
  }

  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }
  int64_t local_rank() const override { return local_rank_; }
  std::string describe() const override {
    std::string s = "mpi (" + library_ + "), " + std::to_string(size_) + (size_ == 1 ? " rank" : " ranks");
#ifdef KILN_DIST_NCCL
    s += ", nccl " + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + " for CUDA buffers";
#endif
    return s;
  }

  bool supports(Device device) const override {
#ifdef KILN_DIST_NCCL
    return true;
#else
    return device.is_cpu();
#endif
  }

  void allreduce(Device device, DType t, void *buf, int64_t n, bool mean) override {
    usable();
    check(!mean || t == DType::F32 || t == DType::F64, KILN_ERROR_NOT_SUPPORTED,
          std::string("a mean over ranks needs a float buffer, not ") + dtype_name(t));
    if (!device.is_cpu()) return nccl_allreduce(device, t, buf, n, mean);
    const MPI_Datatype type = mpi_type(t);
    const int64_t elem = dtype_size(t);
    for (int64_t done = 0; done < n;) {  // MPI counts are ints
      const int count = int(std::min<int64_t>(n - done, INT_MAX));
      MPI_Request request;
      call(MPI_Iallreduce(MPI_IN_PLACE, static_cast<char *>(buf) + done * elem, count, type, MPI_SUM, comm_, &request),
           "MPI_Iallreduce");
      wait(request, "allreduce");
      done += count;
    }
    if (mean) {
      if (t == DType::F32) {
        const float inv = 1.0f / float(size_);
        for (float *p = static_cast<float *>(buf), *e = p + n; p < e; ++p) *p *= inv;
      } else {
        const double inv = 1.0 / double(size_);
        for (double *p = static_cast<double *>(buf), *e = p + n; p < e; ++p) *p *= inv;
      }
    }
  }

  void broadcast(Device device, void *buf, int64_t bytes, int64_t root) override {
    usable();
    if (!device.is_cpu()) return nccl_broadcast(device, buf, bytes, root);
    for (int64_t done = 0; done < bytes;) {
      const int count = int(std::min<int64_t>(bytes - done, INT_MAX));
      MPI_Request request;
      call(MPI_Ibcast(static_cast<char *>(buf) + done, count, MPI_BYTE, int(root), comm_, &request), "MPI_Ibcast");
      wait(request, "broadcast");
      done += count;
    }
  }

  void allgather(const void *in, int64_t bytes, void *out) override {
    usable();
    check(bytes <= INT_MAX, KILN_ERROR_NOT_SUPPORTED, "allgather of more than 2 GiB per rank");
    MPI_Request request;
    call(MPI_Iallgather(in, int(bytes), MPI_BYTE, out, int(bytes), MPI_BYTE, comm_, &request), "MPI_Iallgather");
    wait(request, "allgather");
  }

  void set_timeout(double seconds) override { timeout_ = seconds; }
  double timeout() const override { return timeout_; }

 private:
  // Every call fails the same way once a collective failed (collective.hpp).
  void usable() const {
    if (!broken_.empty()) fail(KILN_ERROR_COMMUNICATION, "the communicator is broken: " + broken_);
  }

  [[noreturn]] void break_with(const std::string &why) {
    broken_ = why + " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
    fail(KILN_ERROR_COMMUNICATION, broken_);
  }

  void call(int rc, const char *what) {
    if (rc != MPI_SUCCESS) break_with(std::string(what) + " failed: " + mpi_error(rc));
  }

  // Polls request until it completes, fails or the timeout passes: spinning
  // on MPI_Test for the first 10 ms, as MPI's blocking calls do (measured
  // here: a 100 KB allreduce over 2 ranks takes 0.3 ms spinning, 4 ms when
  // each test is followed by sched_yield on a loaded machine), then yielding
  // the core, and after a second sleeping, for a peer that is far behind.
  void wait(MPI_Request &request, const char *what) {
    const Clock::time_point start = Clock::now();
    for (;;) {
      int done = 0;
      int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) break_with(std::string(what) + " failed (a peer rank died?): " + mpi_error(rc));
      if (done) return;
      const double waited = std::chrono::duration<double>(Clock::now() - start).count();
      if (waited > timeout_) {
        std::lock_guard<std::mutex> lock(g_mutex);
        g_pending_left = true;
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%g", timeout_);
        break_with(std::string(what) + " did not complete within " + seconds +
                   " s: a peer rank died, hangs or is not making the same calls (timeout: "
                   "kiln_communicator_set_timeout or KILN_DIST_TIMEOUT)");
      }
      if (waited < 0.01) continue;
      if (waited < 1) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
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

  // The NCCL communicator of this rank's GPU, created on first use: every
  // rank reaches its first GPU collective together, so the unique id of rank
  // 0 can be broadcast over MPI then.
  void nccl_for(Device device) {
    if (nccl_) {
      check(device.index == nccl_device_, KILN_ERROR_INVALID_ARGUMENT,
            "this communicator runs NCCL on cuda:" + std::to_string(nccl_device_) + ", not " + device.str());
      return;
    }
    ncclUniqueId id{};
    if (rank_ == 0) nccl_call(ncclGetUniqueId(&id), "ncclGetUniqueId");
    broadcast(Device::cpu(), &id, sizeof id, 0);
    cuda_call(cudaSetDevice(int(device.index)), "cudaSetDevice");
    cuda_call(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    nccl_call(ncclCommInitRank(&nccl_, int(size_), id, int(rank_)), "ncclCommInitRank");
    nccl_device_ = device.index;
  }

  // Waits for the stream like wait() does for MPI: polled against the
  // deadline, the NCCL communicator aborted on a timeout or an async error.
  void nccl_wait(const char *what) {
    const Clock::time_point start = Clock::now();
    for (;;) {
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) cuda_call(q, what);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(nccl_, &async);
      if (async != ncclSuccess && async != ncclInProgress) nccl_call(async, what);
      if (std::chrono::duration<double>(Clock::now() - start).count() > timeout_) {
        ncclCommAbort(nccl_);
        nccl_ = nullptr;
        break_with(std::string(what) + " on the GPU did not complete within " + std::to_string(timeout_) + " s");
      }
      std::this_thread::yield();
    }
  }

  void nccl_allreduce(Device device, DType t, void *buf, int64_t n, bool mean) {
    nccl_for(device);
    nccl_call(ncclAllReduce(buf, buf, size_t(n), nccl_type(t), mean ? ncclAvg : ncclSum, nccl_, stream_),
              "ncclAllReduce");
    nccl_wait("allreduce");
  }

  void nccl_broadcast(Device device, void *buf, int64_t bytes, int64_t root) {
    nccl_for(device);
    nccl_call(ncclBroadcast(buf, buf, size_t(bytes), ncclUint8, int(root), nccl_, stream_), "ncclBroadcast");
    nccl_wait("broadcast");
  }

  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int64_t nccl_device_ = -1;
#else
  [[noreturn]] void no_nccl(Device device) const {
    fail(KILN_ERROR_NOT_SUPPORTED, "collectives over " + device.str() +
                                       " buffers need NCCL, and this libkiln_dist.so was built without it");
  }
  void nccl_allreduce(Device device, DType, void *, int64_t, bool) { no_nccl(device); }
  void nccl_broadcast(Device device, void *, int64_t, int64_t) { no_nccl(device); }
#endif

  MPI_Comm comm_ = MPI_COMM_NULL;
  int64_t rank_ = 0, size_ = 1, local_rank_ = 0;
  std::string library_;
  double timeout_;
  std::string broken_;  // non-empty: the first failure, repeated by every later call
};

}  // namespace
}  // namespace kiln

extern "C" {

__attribute__((visibility("default"))) int kiln_dist_interface_version(void) { return kiln::kDistInterfaceVersion; }

__attribute__((visibility("default"))) kiln::Collective *kiln_dist_create_mpi(kiln_status *status, char *reason,
                                                                              int64_t reason_size) {
  try {
    return new kiln::MpiCollective();
  } catch (const kiln::Error &e) {
    *status = e.status();
    std::snprintf(reason, size_t(reason_size), "%s", e.what());
  } catch (const std::exception &e) {
    *status = KILN_ERROR_INTERNAL;
    std::snprintf(reason, size_t(reason_size), "%s", e.what());
  }
  return nullptr;
}

}  // extern "C"
