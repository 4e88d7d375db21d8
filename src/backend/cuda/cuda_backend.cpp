// CudaBackend: devices, memory, copies, streams, the thin forwarding of
// kernels to their launchers, and the plugin's two C entry points.
#include "backend/cuda/cuda_backend.hpp"

#include <cuda_runtime_api.h>

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/cuda/check.hpp"
#include "backend/driver_probe.hpp"
#include "backend/cuda/program.hpp"
#include "core/program.hpp"
#include "backend/plugin.hpp"

namespace kiln::cuda {
namespace {

std::string device_name(int64_t index) { return "cuda:" + std::to_string(index); }

std::string mib(int64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// Grid-stride kernels launch up to this many blocks per SM: enough resident
// warps to saturate memory bandwidth, few enough to keep per-block atomics rare.
constexpr int64_t kBlocksPerSm = 8;

// This thread's redirection of one device's kernels (CudaBackend::Redirect).
struct RedirectState {
  int64_t index = -1;
  cudaStream_t stream = nullptr;
};
thread_local RedirectState t_redirect;

}  // namespace

CudaBackend::Scope::Scope(const CudaBackend &backend, int64_t index) {
  backend.check_index(index);
  faults().check_usable(int(index));
  KILN_CUDA_TRY(cudaGetDevice(&previous_), device_name(index));
  if (previous_ != int(index))
    KILN_CUDA_TRY_AS(cudaSetDevice(int(index)), KILN_ERROR_DEVICE_UNAVAILABLE, "making " + device_name(index) + " current");
  index_ = int(index);
}

CudaBackend::Scope::~Scope() {
  if (previous_ != index_) cudaSetDevice(previous_);
}

CudaBackend::Redirect::Redirect(int64_t index, cudaStream_t stream) { t_redirect = {index, stream}; }

CudaBackend::Redirect::~Redirect() { t_redirect = {}; }

Launch CudaBackend::launch(int64_t index) {
  Launch L = device(index).launch;
  if (t_redirect.index == index) L.stream = t_redirect.stream;
  return L;
}

Gemm &CudaBackend::matmuls(int64_t index) { return *device(index).gemm; }

CudnnEngine *CudaBackend::cudnn(int64_t index, std::string *reason) {
  Device &d = device(index);
  std::call_once(d.cudnn_once, [&] { d.cudnn = CudnnEngine::create(d.launch, d.pool, &d.cudnn_reason); });
  *reason = d.cudnn_reason;
  return d.cudnn.get();
}

void CudaBackend::Device::release() noexcept {
  if (stream) cudaStreamSynchronize(stream);  // errors are the caller's to see earlier; here only tidy up
  cudnn.reset();  // its workspaces go back to the pool on the stream, so before both
  gemm.reset();
  if (pool) cudaMemPoolDestroy(pool);  // outstanding allocations keep it alive until freed
  if (stream) cudaStreamDestroy(stream);
  stream = nullptr, pool = nullptr;
}

CudaBackend::CudaBackend(int device_count) {
  for (int i = 0; i < device_count; ++i) devices_.push_back(std::make_unique<Device>());
  try {
    cudnn_softmax_ = (fast_path_with_env(kFastDefault) & kFastCudnn) != 0;
  } catch (const Error &) {
    // A malformed KILN_ENABLE or KILN_DISABLE is reported where programs are
    // made; softmax stays on kiln's kernel meanwhile.
  }
}

CudaBackend::~CudaBackend() {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (!devices_[i]->ready.load(std::memory_order_acquire)) continue;
    if (cudaSetDevice(int(i)) == cudaSuccess) devices_[i]->release();
  }
  if (previous >= 0) cudaSetDevice(previous);
}

void CudaBackend::check_index(int64_t index) const {
  if (index < 0 || index >= device_count())
    fail(KILN_ERROR_DEVICE_UNAVAILABLE, device_name(index) + " does not exist: " + std::to_string(device_count()) +
                                            " CUDA device(s) visible");
}

CudaBackend::Device &CudaBackend::device(int64_t index) {
  Device &d = *devices_[size_t(index)];
  if (d.ready.load(std::memory_order_acquire)) return d;
  std::lock_guard<std::mutex> lock(d.init_mutex);
  if (d.ready.load(std::memory_order_relaxed)) return d;
  const std::string where = "initialising " + device_name(index);
  try {
    int sms = 0, pools = 0;
    KILN_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, int(index)), where);
    KILN_CUDA_TRY(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, int(index)), where);
    size_t free_bytes = 0, total_bytes = 0;
    KILN_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes), where);
    d.total_memory = int64_t(total_bytes);
    KILN_CUDA_TRY(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking), where);
    if (pools) {
      cudaMemPoolProps props{};
      props.allocType = cudaMemAllocationTypePinned;
      props.handleTypes = cudaMemHandleTypeNone;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = int(index);
      KILN_CUDA_TRY(cudaMemPoolCreate(&d.pool, &props), where);
      uint64_t keep_all = UINT64_MAX;
      KILN_CUDA_TRY(cudaMemPoolSetAttribute(d.pool, cudaMemPoolAttrReleaseThreshold, &keep_all), where);
    }
    d.gemm = std::make_unique<Gemm>(d.stream);
    d.launch = Launch{d.stream, std::max<int64_t>(1, sms) * kBlocksPerSm};
  } catch (...) {
    d.release();
    throw;
  }
  d.ready.store(true, std::memory_order_release);
  return d;
}

DeviceInfo CudaBackend::info(int64_t index) const {
  Scope scope(*this, index);  // cudaMemGetInfo reports the current device
  const std::string where = "device info of " + device_name(index);
  cudaDeviceProp prop{};
  KILN_CUDA_TRY(cudaGetDeviceProperties(&prop, int(index)), where);
  size_t free_bytes = 0, total_bytes = 0;
  KILN_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes), where);
  int driver = 0, runtime = 0;
  KILN_CUDA_TRY(cudaDriverGetVersion(&driver), where);
  KILN_CUDA_TRY(cudaRuntimeGetVersion(&runtime), where);
  DeviceInfo info;
  info.name = prop.name;
  info.total_memory = int64_t(prop.totalGlobalMem);
  info.free_memory = int64_t(free_bytes);
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.multiprocessor_count = prop.multiProcessorCount;
  info.driver_version = driver;
  info.runtime_version = runtime;
  return info;
}

void CudaBackend::synchronize(int64_t index) {
  check_index(index);
  if (!devices_[size_t(index)]->ready.load(std::memory_order_acquire)) return;  // nothing was ever queued
  Scope scope(*this, index);
  KILN_CUDA_TRY(cudaStreamSynchronize(device(index).stream), "waiting for " + device_name(index));
}

// Every stream of the device, other libraries' too (a DLPack consumer's).
void CudaBackend::synchronize_device(int64_t index) {
  check_index(index);
  if (!devices_[size_t(index)]->ready.load(std::memory_order_acquire)) return;  // kiln never used it
  Scope scope(*this, index);
  KILN_CUDA_TRY(cudaDeviceSynchronize(), "waiting for all work on " + device_name(index));
}

// This thread's stream for the device: a redirected one while a graph is
// being captured (Redirect), else the device's.
void *CudaBackend::queue(int64_t index) {
  check_index(index);
  Scope scope(*this, index);
  return launch(index).stream;
}

// ---- memory -------------------------------------------------------------------

void *CudaBackend::alloc(int64_t index, int64_t bytes) {
  if (bytes <= 0) return nullptr;
  Scope scope(*this, index);
  Device &d = device(index);
  if (bytes > d.total_memory)  // a size bug or a huge model: no retry or pool trim can help
    fail(KILN_ERROR_OUT_OF_MEMORY, "out of memory on " + device_name(index) + ": cannot allocate " +
                                       std::to_string(bytes) + " bytes (" + mib(bytes) + "), more than the device's " +
                                       mib(d.total_memory) + " in total");
  auto attempt = [&](void **p) {
    return d.pool ? cudaMallocFromPoolAsync(p, size_t(bytes), d.pool, d.stream) : cudaMalloc(p, size_t(bytes));
  };
  void *p = nullptr;
  cudaError_t e = attempt(&p);
  if (e == cudaErrorMemoryAllocation && d.pool) {
    // Freed blocks return to the pool only as the stream reaches their frees,
    // and the pool keeps them: wait, hand everything back, try once more.
    cudaGetLastError();
    KILN_CUDA_TRY(cudaStreamSynchronize(d.stream), "waiting for " + device_name(index) + " before retrying an allocation");
    KILN_CUDA_TRY(cudaMemPoolTrimTo(d.pool, 0), "trimming the memory pool of " + device_name(index));
    e = attempt(&p);
  }
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    fail(KILN_ERROR_OUT_OF_MEMORY, "out of memory on " + device_name(index) + ": cannot allocate " +
                                       std::to_string(bytes) + " bytes (" + mib(bytes) + "); " + mib(int64_t(free_bytes)) +
                                       " free of " + mib(int64_t(total_bytes)));
  }
  KILN_CUDA_TRY(e, "allocating " + std::to_string(bytes) + " bytes on " + device_name(index));
  return p;
}

// Never throws: it runs from destructors. A failure here means the device is
// already broken, and the next queued operation reports that.
void CudaBackend::free(int64_t index, void *ptr) {
  if (!ptr || index < 0 || index >= device_count()) return;
  try {
    Scope scope(*this, index);
    Device &d = device(index);
    if ((d.pool ? cudaFreeAsync(ptr, d.stream) : cudaFree(ptr)) != cudaSuccess) cudaGetLastError();
  } catch (...) {
  }
}

int64_t CudaBackend::pinned_device() const {
  for (size_t i = 0; i < devices_.size(); ++i)
    if (devices_[i]->ready.load(std::memory_order_acquire)) return int64_t(i);
  int current = 0;
  KILN_CUDA_TRY(cudaGetDevice(&current), "choosing the device for page-locked memory");
  return current;
}

void *CudaBackend::alloc_pinned(int64_t bytes) {
  if (bytes <= 0) return nullptr;
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  const int64_t host_memory = pages > 0 && page_size > 0 ? int64_t(pages) * page_size : INT64_MAX;
  if (bytes > host_memory)
    fail(KILN_ERROR_OUT_OF_MEMORY, "cannot allocate " + std::to_string(bytes) + " bytes (" + mib(bytes) +
                                       ") of page-locked host memory: the machine has " + mib(host_memory));
  Scope scope(*this, pinned_device());
  void *p = nullptr;
  cudaError_t e = cudaHostAlloc(&p, size_t(bytes), cudaHostAllocPortable);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    fail(KILN_ERROR_OUT_OF_MEMORY, "cannot allocate " + std::to_string(bytes) + " bytes (" + mib(bytes) +
                                       ") of page-locked host memory");
  }
  KILN_CUDA_TRY(e, "allocating " + std::to_string(bytes) + " bytes of page-locked host memory");
  return p;
}

// Never throws, as free. Inside the scope of the device the memory was
// allocated through (alloc_pinned): cudaFreeHost on a thread whose current
// device has no context yet would create one on device 0.
void CudaBackend::free_pinned(void *ptr) {
  if (!ptr) return;
  try {
    Scope scope(*this, pinned_device());
    if (cudaFreeHost(ptr) != cudaSuccess) cudaGetLastError();
  } catch (...) {
    // A broken device: its page-locked memory goes with the process.
  }
}

void CudaBackend::copy_to_device(int64_t index, void *dst, const void *host_src, int64_t bytes, bool pinned) {
  if (bytes <= 0) return;
  Scope scope(*this, index);
  cudaStream_t s = device(index).stream;
  auto what = [&] { return "copying " + std::to_string(bytes) + " bytes to " + device_name(index); };
  KILN_CUDA_TRY(cudaMemcpyAsync(dst, host_src, size_t(bytes), cudaMemcpyHostToDevice, s), what());
  if (!pinned) KILN_CUDA_TRY(cudaStreamSynchronize(s), what());
}

void CudaBackend::copy_to_host(int64_t index, void *host_dst, const void *src, int64_t bytes, bool pinned) {
  if (bytes <= 0) return;
  Scope scope(*this, index);
  cudaStream_t s = device(index).stream;
  auto what = [&] { return "copying " + std::to_string(bytes) + " bytes from " + device_name(index); };
  KILN_CUDA_TRY(cudaMemcpyAsync(host_dst, src, size_t(bytes), cudaMemcpyDeviceToHost, s), what());
  if (!pinned) KILN_CUDA_TRY(cudaStreamSynchronize(s), what());
}

void CudaBackend::copy_on_device(int64_t index, void *dst, const void *src, int64_t bytes) {
  if (bytes <= 0 || dst == src) return;
  Scope scope(*this, index);
  KILN_CUDA_TRY(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, device(index).stream),
                "copying " + std::to_string(bytes) + " bytes on " + device_name(index));
}

// ---- kernels: make the device current, then queue on its stream ------------------

void CudaBackend::fill(int64_t index, const FillArgs &args) {
  Scope scope(*this, index);
  cuda::fill(launch(index), args);
}

void CudaBackend::arange(int64_t index, const ArangeArgs &args) {
  Scope scope(*this, index);
  cuda::arange(launch(index), args);
}

void CudaBackend::cast(int64_t index, const CastArgs &args) {
  Scope scope(*this, index);
  cuda::cast(launch(index), args);
}

void CudaBackend::unary(int64_t index, const UnaryArgs &args) {
  Scope scope(*this, index);
  cuda::unary(launch(index), args);
}

void CudaBackend::scalar(int64_t index, const ScalarArgs &args) {
  Scope scope(*this, index);
  cuda::scalar(launch(index), args);
}

void CudaBackend::binary(int64_t index, const BinaryArgs &args) {
  Scope scope(*this, index);
  cuda::binary(launch(index), args);
}

void CudaBackend::reduce(int64_t index, const ReduceArgs &args) {
  Scope scope(*this, index);
  cuda::reduce(launch(index), args);
}

void CudaBackend::softmax(int64_t index, const SoftmaxArgs &args) {
  Scope scope(*this, index);
  const Launch L = launch(index);
  auto own = [&] { cuda::softmax(L, args); };
  std::string why_not;  // cuDNN being unavailable only means kiln's kernel
  CudnnEngine *engine = args.inner == 1 && cudnn_softmax_ ? cudnn(index, &why_not) : nullptr;
  if (engine) engine->softmax(L, args, own);
  else own();
}

void CudaBackend::gemm(int64_t index, const GemmArgs &args) {
  Scope scope(*this, index);
  matmuls(index).run(launch(index), args);
}

void CudaBackend::bias_act(int64_t index, const BiasActArgs &args) {
  Scope scope(*this, index);
  cuda::bias_act(launch(index), args);
}

void CudaBackend::act_backward(int64_t index, const ActBackwardArgs &args) {
  Scope scope(*this, index);
  cuda::act_backward(launch(index), args);
}

void CudaBackend::bias_grad(int64_t index, const BiasGradArgs &args) {
  Scope scope(*this, index);
  cuda::bias_grad(launch(index), args);
}

void CudaBackend::cross_entropy(int64_t index, const LossArgs &args) {
  Scope scope(*this, index);
  cuda::cross_entropy(launch(index), args);
}

void CudaBackend::mse(int64_t index, const LossArgs &args) {
  Scope scope(*this, index);
  cuda::mse(launch(index), args);
}

void CudaBackend::bce_with_logits(int64_t index, const LossArgs &args) {
  Scope scope(*this, index);
  cuda::bce_with_logits(launch(index), args);
}

void CudaBackend::dropout(int64_t index, const DropoutArgs &args, const StepParams *step) {
  Scope scope(*this, index);
  cuda::dropout(launch(index), args, step);
}

void CudaBackend::dropout_backward(int64_t index, const DropoutBackwardArgs &args) {
  Scope scope(*this, index);
  cuda::dropout_backward(launch(index), args);
}

void CudaBackend::clip_grad_norm(int64_t index, const ClipArgs &args) {
  Scope scope(*this, index);
  cuda::clip_grad_norm(launch(index), args);
}

void CudaBackend::sgd_update(int64_t index, const SgdArgs &args, const StepParams *step) {
  Scope scope(*this, index);
  cuda::sgd_update(launch(index), args, step);
}

void CudaBackend::adam_update(int64_t index, const AdamArgs &args, const StepParams *step) {
  Scope scope(*this, index);
  cuda::adam_update(launch(index), args, step);
}

void CudaBackend::gather(int64_t index, const GatherArgs &args, const StepParams *step) {
  Scope scope(*this, index);
  cuda::gather(launch(index), args, step);
}

// The sort's scratch comes from the device's pool and goes back to it in
// stream order, so a shuffle per epoch costs no device-wide synchronisation.
void CudaBackend::shuffle(int64_t index, int64_t n, uint64_t seed, int64_t *out) {
  if (n <= 0) return;
  Scope scope(*this, index);
  const size_t bytes = shuffle_scratch_bytes(n);
  void *scratch = alloc(index, int64_t(bytes));
  try {
    cuda::shuffle(launch(index), n, seed, out, scratch, bytes);
  } catch (...) {
    free(index, scratch);
    throw;
  }
  free(index, scratch);
}

std::unique_ptr<Executable> CudaBackend::compile(int64_t index, const StepProgram &program) {
  Scope scope(*this, index);
  return compile_cuda(*this, index, program);
}

// ---- plugin entry points ------------------------------------------------------------

namespace {

// Why no backend can be made, or "" when devices are there.
std::string unavailable_reason(int *count) {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);  // 0 when no driver could be loaded
  cudaRuntimeGetVersion(&runtime);
  cudaError_t e = cudaGetDeviceCount(count);
  cudaGetLastError();
  const char *visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string visible_text = visible ? std::string(" (CUDA_VISIBLE_DEVICES=\"") + visible + "\")" : "";
  if (e == cudaSuccess) return *count > 0 ? "" : "no CUDA device found" + visible_text;
  if (driver == 0)  // the runtime says the same for a missing driver and one that fails to start: ask the driver
    return "no CUDA driver: " + describe_driver_failure("libcuda.so.1") + " (the CUDA runtime says: " +
           cudaGetErrorString(e) + ")";
  if (e == cudaErrorInsufficientDriver || driver < runtime)
    return "the CUDA driver is too old: it supports CUDA " + version_text(driver) + ", libkiln_cuda needs CUDA " +
           version_text(runtime) + " (update the NVIDIA driver): " + cudaGetErrorString(e);
  if (e == cudaErrorNoDevice) return "no CUDA device found" + visible_text + ": " + cudaGetErrorString(e);
  return std::string("cannot use CUDA: cudaGetDeviceCount failed: ") + cudaGetErrorName(e) + ": " +
         cudaGetErrorString(e) + visible_text;
}

}  // namespace
}  // namespace kiln::cuda

extern "C" __attribute__((visibility("default"))) kiln::Backend *kiln_backend_cuda_create(char *reason,
                                                                                         int64_t reason_size) noexcept {
  std::string why;
  try {
    int count = 0;
    why = kiln::cuda::unavailable_reason(&count);
    if (why.empty()) return new kiln::cuda::CudaBackend(count);
  } catch (const std::exception &e) {
    why = std::string("cannot create the CUDA backend: ") + e.what();
  } catch (...) {
    why = "cannot create the CUDA backend: unknown error";
  }
  if (reason && reason_size > 0) std::snprintf(reason, size_t(reason_size), "%s", why.c_str());
  return nullptr;
}
