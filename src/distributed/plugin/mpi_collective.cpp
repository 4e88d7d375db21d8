// libkiln_dist.so: kiln::Collective over Open MPI, and over NCCL for CUDA
// buffers when built with KILN_DIST_NCCL (see src/distributed/plugin.hpp).
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

#include <algorithm>
#include <climits>
#include <cstdio>
#include <mutex>
#include <string>

#include "distributed/plugin.hpp"
#include "distributed/plugin/engine.hpp"

namespace kiln::dist {
namespace {

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

class MpiCollective final : public PluginCollective {
 public:
  MpiCollective() {
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
    // Nonblocking and polled like every collective, so a process of the job
    // that never creates its communicator fails this one within the timeout
    // (KILN_DIST_TIMEOUT) instead of hanging it. MPI_Init_thread itself waits
    // for every process mpirun started; bounding that is mpirun's part.
    MPI_Request request;
    call(MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &request), "MPI_Comm_idup");
    wait(request, "creating the communicator (MPI_Comm_idup: every process of the job must create one)");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    int rank = 0, size = 0;
    MPI_Comm_rank(comm_, &rank);
    MPI_Comm_size(comm_, &size);
    rank_ = rank, size_ = size;
    local_rank_ = rank_among_host();
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    MPI_Get_library_version(version, &len);
    library_ = std::string(version, size_t(len));
    library_ = library_.substr(0, library_.find_first_of(",\n"));
  }

  ~MpiCollective() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && broken_.empty()) MPI_Comm_free(&comm_);
  }

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
    check_mean(t, mean);
    if (!device.is_cpu()) return gpu_allreduce(device, t, buf, n, mean);
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

  void allreduce_start(Device device, DType t, void *buf, int64_t n, bool mean, void *producer) override {
    if (device.is_cpu()) return allreduce(device, t, buf, n, mean);
    usable();
    check_mean(t, mean);
    gpu_allreduce_start(device, t, buf, n, mean, producer);
  }

  void broadcast(Device device, void *buf, int64_t bytes, int64_t root) override {
    usable();
    if (!device.is_cpu()) return gpu_broadcast(device, buf, bytes, root);
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

 private:
  // This rank's index among the ranks on the same host: the ranks that share
  // its processor name (what MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)
  // groups, which has no nonblocking form to bound with the timeout).
  int64_t rank_among_host() {
    char mine[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    call(MPI_Get_processor_name(mine, &len), "MPI_Get_processor_name");
    std::string all(size_t(size_) * sizeof mine, '\0');
    allgather(mine, sizeof mine, all.data());
    int64_t local = 0;
    for (int64_t r = 0; r < rank_; ++r)
      if (all.compare(size_t(r) * sizeof mine, sizeof mine, mine, sizeof mine) == 0) ++local;
    return local;
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
      const double waited = seconds_since(start);
      const bool late = waited > timeout_;
      if (late || aborted()) {  // the request stays pending: MPI_Finalize must not wait for it
        std::lock_guard<std::mutex> lock(g_mutex);
        g_pending_left = true;
        if (!late) break_with(std::string(what) + " " + abort_message());
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
  // The NCCL communicator of this rank's GPU, created on first use: every
  // rank reaches its first GPU collective together, so the unique id of rank
  // 0 can be broadcast over MPI then. Nonblocking and polled (engine.hpp): a
  // rank that died before its first GPU collective makes this one fail
  // within the timeout instead of waiting in NCCL's bootstrap forever.
  void nccl_for(Device device) {
    if (nccl_) return check_nccl_device(device);
    ncclUniqueId id{};
    if (rank_ == 0) nccl_call(ncclGetUniqueId(&id), "ncclGetUniqueId");
    broadcast(Device::cpu(), &id, sizeof id, 0);
    cuda_call(cudaSetDevice(int(device.index)), "cudaSetDevice");
    if (!stream_) cuda_call(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    ncclConfig_t config = nonblocking_config();
    nccl_call(ncclCommInitRankConfig(&nccl_, int(size_), id, int(rank_), &config),
              "creating the NCCL communicator (ncclCommInitRankConfig, at every rank's first GPU collective)");
    nccl_device_ = device.index;
  }

  void gpu_allreduce(Device device, DType t, void *buf, int64_t n, bool mean) {
    nccl_for(device);
    nccl_allreduce(t, buf, n, mean);
  }

  void gpu_allreduce_start(Device device, DType t, void *buf, int64_t n, bool mean, void *producer) {
    nccl_for(device);
    nccl_allreduce_start(t, buf, n, mean, producer);
  }

  void gpu_broadcast(Device device, void *buf, int64_t bytes, int64_t root) {
    nccl_for(device);
    nccl_broadcast(buf, bytes, root);
  }
#else
  [[noreturn]] void no_nccl(Device device) const {
    fail(KILN_ERROR_NOT_SUPPORTED, "collectives over " + device.str() +
                                       " buffers need NCCL, and this libkiln_dist.so was built without it");
  }
  void gpu_allreduce(Device device, DType, void *, int64_t, bool) { no_nccl(device); }
  void gpu_allreduce_start(Device device, DType, void *, int64_t, bool, void *) { no_nccl(device); }
  void gpu_broadcast(Device device, void *, int64_t, int64_t) { no_nccl(device); }
#endif

  MPI_Comm comm_ = MPI_COMM_NULL;
  int64_t local_rank_ = 0;
  std::string library_;
};

}  // namespace
}  // namespace kiln::dist

extern "C" {

__attribute__((visibility("default"))) kiln::Collective *kiln_dist_create_mpi(kiln_status *status, char *reason,
                                                                              int64_t reason_size) {
  try {
    return new kiln::dist::MpiCollective();
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
