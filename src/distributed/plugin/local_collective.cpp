// libkiln_dist.so: communicators over the GPUs of one process, one per GPU,
// from NCCL alone (one group of nonblocking ncclCommInitRankConfig, polled
// against KILN_DIST_TIMEOUT; no MPI). Each is a rank: its own thread
// drives a trainer on its GPU, and the ranks meet in every collective, as
// processes do under mpirun. Host buffers (the few numbers a trainer
// exchanges: metrics, counters, a configuration hash) are staged through a
// small buffer on the rank's GPU, so NCCL is the one engine.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "distributed/plugin.hpp"
#include "distributed/plugin/engine.hpp"

#ifdef KILN_DIST_NCCL

namespace kiln::dist {
namespace {

class LocalCollective final : public PluginCollective {
 public:
  // Takes over comm, rank `rank` of init_local's communicators over `size` GPUs.
  LocalCollective(ncclComm_t comm, int64_t device, int64_t rank, int64_t size) {
    nccl_ = comm;
    nccl_device_ = device;
    rank_ = rank, size_ = size;
    cuda_call(cudaSetDevice(int(device)), "cudaSetDevice");
    cuda_call(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }

  ~LocalCollective() override {
    if (scratch_) cudaFree(scratch_);
  }

  int64_t local_rank() const override { return rank_; }
  std::string describe() const override {
    return "nccl " + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + " over " +
           std::to_string(size_) + " GPUs of one process";
  }
  bool supports(Device device) const override { return device.index == nccl_device_ && !device.is_cpu(); }

  void allreduce(Device device, DType t, void *buf, int64_t n, bool mean) override {
    usable();
    check_mean(t, mean);
    const int64_t bytes = n * dtype_size(t);
    if (!device.is_cpu()) {
      check_nccl_device(device);
      return nccl_allreduce(t, buf, n, mean);
    }
    to_scratch(buf, bytes, 0);
    nccl_allreduce(t, scratch_, n, mean);
    from_scratch(buf, bytes, 0);
  }

  void allreduce_start(Device device, DType t, void *buf, int64_t n, bool mean, void *producer) override {
    if (device.is_cpu()) return allreduce(device, t, buf, n, mean);
    usable();
    check_mean(t, mean);
    check_nccl_device(device);
    nccl_allreduce_start(t, buf, n, mean, producer);
  }

  void broadcast(Device device, void *buf, int64_t bytes, int64_t root) override {
    usable();
    if (!device.is_cpu()) {
      check_nccl_device(device);
      return nccl_broadcast(buf, bytes, root);
    }
    to_scratch(buf, bytes, 0);
    nccl_broadcast(scratch_, bytes, root);
    from_scratch(buf, bytes, 0);
  }

  void allgather(const void *in, int64_t bytes, void *out) override {
    usable();
    // In place: this rank's part already sits at its offset of the result.
    to_scratch(in, bytes, rank_ * bytes, size_ * bytes);
    cuda_call(cudaSetDevice(int(nccl_device_)), "cudaSetDevice");
    char *base = static_cast<char *>(scratch_);
    nccl_call(ncclAllGather(base + rank_ * bytes, base, size_t(bytes), ncclUint8, nccl_, stream_), "ncclAllGather");
    nccl_wait("allgather");
    from_scratch(out, size_ * bytes, 0);
  }

 private:
  // Host bytes into the scratch buffer at offset (grown to at least `need`).
  void to_scratch(const void *host, int64_t bytes, int64_t offset, int64_t need = 0) {
    need = std::max(need, offset + bytes);
    cuda_call(cudaSetDevice(int(nccl_device_)), "cudaSetDevice");
    if (need > scratch_bytes_) {
      if (scratch_) cuda_call(cudaFree(scratch_), "cudaFree");
      scratch_ = nullptr;
      cuda_call(cudaMalloc(&scratch_, size_t(need)), "cudaMalloc");
      scratch_bytes_ = need;
    }
    cuda_call(cudaMemcpyAsync(static_cast<char *>(scratch_) + offset, host, size_t(bytes), cudaMemcpyHostToDevice,
                              stream_),
              "cudaMemcpyAsync");
  }

  void from_scratch(void *host, int64_t bytes, int64_t offset) {
    cuda_call(cudaMemcpyAsync(host, static_cast<char *>(scratch_) + offset, size_t(bytes), cudaMemcpyDeviceToHost,
                              stream_),
              "cudaMemcpyAsync");
    cuda_call(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  void *scratch_ = nullptr;
  int64_t scratch_bytes_ = 0;
};

// One nonblocking communicator per device, rank i on devices[i], created as
// one NCCL group and polled until every rank is up or `timeout` seconds
// pass (ncclCommInitAll would block with no bound). On failure every
// communicator made so far is aborted and the reason is in *why.
kiln_status init_local(const int64_t *devices, int64_t count, double timeout, std::vector<ncclComm_t> &comms,
                       std::string *why) {
  auto nccl_failed = [&](const char *what, ncclResult_t rc) {
    *why = std::string(what) + " failed: " + ncclGetErrorString(rc);
    return KILN_ERROR_DEVICE_UNAVAILABLE;
  };
  ncclUniqueId id{};
  ncclResult_t rc = ncclGetUniqueId(&id);
  if (rc != ncclSuccess) return nccl_failed("ncclGetUniqueId", rc);
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  rc = ncclGroupStart();
  for (int64_t i = 0; i < count && rc == ncclSuccess; ++i) {
    if (cudaSetDevice(int(devices[i])) != cudaSuccess) {
      *why = "cudaSetDevice(" + std::to_string(devices[i]) + ") failed: " + cudaGetErrorString(cudaGetLastError());
      ncclGroupEnd();
      for (ncclComm_t c : comms) if (c) ncclCommAbort(c);
      if (previous >= 0) cudaSetDevice(previous);
      return KILN_ERROR_DEVICE_UNAVAILABLE;
    }
    ncclConfig_t config = nonblocking_config();
    rc = ncclCommInitRankConfig(&comms[size_t(i)], int(count), id, int(i), &config);
    if (rc == ncclInProgress) rc = ncclSuccess;
  }
  const ncclResult_t group = ncclGroupEnd();
  if (previous >= 0) cudaSetDevice(previous);
  if (rc == ncclSuccess && group != ncclInProgress) rc = group;
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < comms.size() && rc == ncclSuccess; ++i)
    if (comms[i]) rc = nccl_poll(comms[i], [&] { return seconds_since(start) > timeout; });
  if (rc == ncclSuccess) return KILN_OK;
  for (ncclComm_t c : comms) if (c) ncclCommAbort(c);
  if (rc == ncclInProgress) {
    *why = "the NCCL communicators did not come up within " + std::to_string(timeout) + " s (KILN_DIST_TIMEOUT)";
    return KILN_ERROR_COMMUNICATION;
  }
  return nccl_failed("ncclCommInitRankConfig", rc);
}

}  // namespace
}  // namespace kiln::dist

#endif  // KILN_DIST_NCCL

extern "C" {

__attribute__((visibility("default"))) kiln_status kiln_dist_create_local(const int64_t *devices, int64_t count,
                                                                          kiln::Collective **out, char *reason,
                                                                          int64_t reason_size) {
#ifdef KILN_DIST_NCCL
  std::vector<ncclComm_t> comms(size_t(count), nullptr);
  int64_t made = 0;
  try {
    std::string why;
    const kiln_status status = kiln::dist::init_local(devices, count, kiln::dist::timeout_from_env(), comms, &why);
    if (status != KILN_OK) {
      std::snprintf(reason, size_t(reason_size), "%s", why.c_str());
      return status;
    }
    for (; made < count; ++made)
      out[made] = new kiln::dist::LocalCollective(comms[size_t(made)], devices[made], made, count);
    return KILN_OK;
  } catch (const kiln::Error &e) {
    std::snprintf(reason, size_t(reason_size), "%s", e.what());
    for (int64_t i = 0; i < made; ++i) delete out[i];  // each closes its NCCL communicator
    for (int64_t i = made; i < count; ++i)
      if (comms[size_t(i)]) ncclCommAbort(comms[size_t(i)]);
    return e.status();
  } catch (const std::exception &e) {
    std::snprintf(reason, size_t(reason_size), "%s", e.what());
    for (int64_t i = 0; i < made; ++i) delete out[i];
    for (int64_t i = made; i < count; ++i)
      if (comms[size_t(i)]) ncclCommAbort(comms[size_t(i)]);
    return KILN_ERROR_INTERNAL;
  }
#else
  std::snprintf(reason, size_t(reason_size),
                "communicators over local GPUs need NCCL, and this libkiln_dist.so was built without it "
                "(build kiln with CUDA where nccl.h and libnccl are found)");
  return KILN_ERROR_NOT_SUPPORTED;
#endif
}

}  // extern "C"
