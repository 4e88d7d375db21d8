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
//
// Threads: MPI's thread level belongs to the process, not to a communicator.
// kiln lets two trainers drive two communicators from two threads at once,
// and below MPI_THREAD_MULTIPLE two threads inside MPI at once is undefined
// (Open MPI then runs without its own locks). So the plugin makes every MPI
// call under one process-wide lock (ProcessMpi below);
// tests/dist_threads_test.cpp drives two communicators per rank at once at
// each level.
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

// The process's MPI, shared by all its communicators.
//
// Why one lock around each MPI call, whatever level MPI runs at, rather than
// a lock only below MPI_THREAD_MULTIPLE: it makes kiln right at
// MPI_THREAD_SERIALIZED, the level a host program may have chosen, with one
// path that every test runs; at MULTIPLE it costs a mutex per MPI call,
// little next to the call. kiln still asks for MULTIPLE when it initializes
// MPI: the lock covers kiln's calls only, and MULTIPLE lets the host
// program's own threads call MPI while kiln's do.
//
// Why it cannot deadlock across ranks: it is never held while waiting for a
// peer. Every collective is nonblocking and polled (wait() takes the lock for
// each MPI_Test only), so while one thread's collective waits for its peers,
// the other threads post and progress theirs (any thread's MPI_Test
// progresses every pending request of the process). Every other call kiln
// makes completes locally (MPI_Comm_free too: Open MPI releases it in place).
// Only MPI_Init_thread and MPI_Finalize wait for peers, under the lock: once
// before any communicator exists, and at exit.
struct ProcessMpi {
  std::mutex mutex;
  int level = MPI_THREAD_SINGLE;  // MPI_Query_thread's, read once MPI is initialized
  // A collective left pending after a timeout: then MPI_Finalize, which may
  // wait for it, is skipped at exit.
  bool pending_left = false;
};
ProcessMpi g_mpi;

// The finalizer is registered only when kiln initialized MPI; a host program
// that did finalizes it itself.
void finalize_at_exit() {
  std::lock_guard<std::mutex> lock(g_mpi.mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !g_mpi.pending_left) MPI_Finalize();
}

const char *level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
  }
}

// Why the calling thread may not call MPI, or "" when it may. Under g_mpi's
// lock, which makes SERIALIZED enough for any thread. Below it only MPI's
// main thread may call, which no lock can make up for. MPI_THREAD_SINGLE,
// what a host program's plain MPI_Init asks for, is taken as FUNNELED: kiln's
// own worker threads never call MPI, and Open MPI makes no difference
// between the two, so refusing every such host program would buy nothing.
std::string thread_refusal() {
  if (g_mpi.level >= MPI_THREAD_SERIALIZED) return "";
  int main_thread = 0;
  MPI_Is_thread_main(&main_thread);
  if (main_thread) return "";
  return std::string("MPI runs at ") + level_name(g_mpi.level) +
         ", so only its main thread (the one that initialized it) may call MPI, and this is another thread "
         "(initialize MPI with MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE to use communicators from any thread)";
}

// Under g_mpi's lock, as every MPI call.
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
    {
      std::lock_guard<std::mutex> lock(g_mpi.mutex);  // also: two threads must not both initialize MPI
      int initialized = 0;
      MPI_Initialized(&initialized);
      if (!initialized) {
        int provided = 0;
        int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) fail(KILN_ERROR_DEVICE_UNAVAILABLE, "MPI_Init_thread failed: " + mpi_error(rc));
        std::atexit(finalize_at_exit);  // the plugin is loaded RTLD_NODELETE, so this stays mapped
      }
      int finalized = 0;
      MPI_Finalized(&finalized);
      check(!finalized, KILN_ERROR_DEVICE_UNAVAILABLE, "MPI was already finalized in this process");
      // What MPI provides, which may be less than kiln asked for, or what the
      // host program chose when it initialized MPI itself.
      MPI_Query_thread(&g_mpi.level);
      const std::string refusal = thread_refusal();
      if (!refusal.empty()) fail(KILN_ERROR_NOT_SUPPORTED, "cannot create an MPI communicator here: " + refusal);
    }
    // Nonblocking and polled like every collective, so a process of the job
    // that never creates its communicator fails this one within the timeout
    // (KILN_DIST_TIMEOUT) instead of hanging it. MPI_Init_thread itself waits
    // for every process mpirun started; bounding that is mpirun's part.
    MPI_Request request;
    call("MPI_Comm_idup", [&] { return MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &request); });
    wait(request, "creating the communicator (MPI_Comm_idup: every process of the job must create one)");
    {
      std::lock_guard<std::mutex> lock(g_mpi.mutex);
      MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
      int rank = 0, size = 0;
      MPI_Comm_rank(comm_, &rank);
      MPI_Comm_size(comm_, &size);
      rank_ = rank, size_ = size;
      char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
      int len = 0;
      MPI_Get_library_version(version, &len);
      library_ = std::string(version, size_t(len));
      library_ = library_.substr(0, library_.find_first_of(",\n"));
    }
    local_rank_ = rank_among_host();
  }

  ~MpiCollective() override {
    std::lock_guard<std::mutex> lock(g_mpi.mutex);
    int finalized = 0;
    MPI_Finalized(&finalized);
    // A broken communicator may have a collective pending, and off MPI's main
    // thread below SERIALIZED no MPI call may be made: MPI_Finalize frees
    // what is left.
    if (!finalized && broken_.empty() && thread_refusal().empty()) MPI_Comm_free(&comm_);
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
    check_thread("allreduce");
    const MPI_Datatype type = mpi_type(t);
    const int64_t elem = dtype_size(t);
    for (int64_t done = 0; done < n;) {  // MPI counts are ints
      const int count = int(std::min<int64_t>(n - done, INT_MAX));
      MPI_Request request;
      call("MPI_Iallreduce", [&] {
        return MPI_Iallreduce(MPI_IN_PLACE, static_cast<char *>(buf) + done * elem, count, type, MPI_SUM, comm_,
                              &request);
      });
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
    check_thread("broadcast");
    for (int64_t done = 0; done < bytes;) {
      const int count = int(std::min<int64_t>(bytes - done, INT_MAX));
      MPI_Request request;
      call("MPI_Ibcast",
           [&] { return MPI_Ibcast(static_cast<char *>(buf) + done, count, MPI_BYTE, int(root), comm_, &request); });
      wait(request, "broadcast");
      done += count;
    }
  }

  void allgather(const void *in, int64_t bytes, void *out) override {
    usable();
    check(bytes <= INT_MAX, KILN_ERROR_NOT_SUPPORTED, "allgather of more than 2 GiB per rank");
    check_thread("allgather");
    MPI_Request request;
    call("MPI_Iallgather",
         [&] { return MPI_Iallgather(in, int(bytes), MPI_BYTE, out, int(bytes), MPI_BYTE, comm_, &request); });
    wait(request, "allgather");
  }

 private:
  // This rank's index among the ranks on the same host: the ranks that share
  // its processor name (what MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)
  // groups, which has no nonblocking form to bound with the timeout).
  int64_t rank_among_host() {
    char mine[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    call("MPI_Get_processor_name", [&] { return MPI_Get_processor_name(mine, &len); });
    std::string all(size_t(size_) * sizeof mine, '\0');
    allgather(mine, sizeof mine, all.data());
    int64_t local = 0;
    for (int64_t r = 0; r < rank_; ++r)
      if (all.compare(size_t(r) * sizeof mine, sizeof mine, mine, sizeof mine) == 0) ++local;
    return local;
  }

  // One MPI call, under the process's lock; a failure breaks the communicator.
  template <class MpiCall> void call(const char *what, MpiCall mpi_call) {
    std::lock_guard<std::mutex> lock(g_mpi.mutex);
    const int rc = mpi_call();
    if (rc != MPI_SUCCESS) break_with(std::string(what) + " failed: " + mpi_error(rc));
  }

  // Refuses a collective from a thread that may not call MPI, before it makes
  // any MPI call, and breaks the communicator: its peers may already wait in
  // that collective, so the ranks no longer agree on what was exchanged.
  void check_thread(const char *what) {
    std::lock_guard<std::mutex> lock(g_mpi.mutex);
    const std::string refusal = thread_refusal();
    if (!refusal.empty()) break_with(std::string(what) + " refused: " + refusal, KILN_ERROR_NOT_SUPPORTED);
  }

  // Polls request until it completes, fails or the timeout passes, taking the
  // process's MPI lock for each test only (see ProcessMpi): spinning
  // on MPI_Test for the first 10 ms, as MPI's blocking calls do (measured
  // here: a 100 KB allreduce over 2 ranks takes 0.3 ms spinning, 4 ms when
  // each test is followed by sched_yield on a loaded machine), then yielding
  // the core, and after a second sleeping, for a peer that is far behind.
  void wait(MPI_Request &request, const char *what) {
    const Clock::time_point start = Clock::now();
    for (;;) {
      int done = 0;
      {
        std::lock_guard<std::mutex> lock(g_mpi.mutex);
        const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) break_with(std::string(what) + " failed (a peer rank died?): " + mpi_error(rc));
      }
      if (done) return;
      const double waited = seconds_since(start);
      const bool late = waited > timeout_;
      if (late || aborted()) {  // the request stays pending: MPI_Finalize must not wait for it
        std::lock_guard<std::mutex> lock(g_mpi.mutex);
        g_mpi.pending_left = true;
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
    fail(KILN_ERROR_NOT_SUPPORTED,
         "collectives over " + device.str() + " buffers need NCCL, and this libkiln_dist.so was built without it");
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
