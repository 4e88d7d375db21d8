// Turns CUDA runtime and cuBLAS failures into kiln::Error. Every call into
// CUDA goes through one of these macros; the context argument (any
// std::string expression) is only evaluated when the call failed, so
// checking costs nothing on the fast path.
//
// Sticky faults: an illegal address, a kernel that traps, an ECC error, ...
// leave the device's CUDA context unusable until the process ends; every
// later call on it would fail with the same code and a confusing context. The
// first such failure is recorded per device (the current device at the time),
// and CudaBackend refuses every later call on that device at once with one
// clear message (check_device_usable).
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <ctime>
#include <map>
#include <mutex>
#include <string>

#include "core/error.hpp"

namespace kiln::cuda {

// "cudaMemcpyAsync(dst, ...)" -> "cudaMemcpyAsync"
inline std::string call_name(const char *call) {
  std::string s = call;
  return s.substr(0, s.find('('));
}

// Errors after which the context is lost (CUDA's "sticky" errors): every one
// driver_types.h documents as leaving "the process in an inconsistent state"
// or asking for the process to be "terminated and relaunched"
// (tests/cuda_sticky_errors_test.cpp reads the header of the toolkit built
// with and checks that none is missing), and the uncorrectable memory and
// NVLink errors.
inline bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorContained:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorMpsClientTerminated:
    case cudaErrorExternalDevice:
      return true;
    default:
      return false;
  }
}

// The first sticky fault of each device, process-wide (so is the context).
class Faults {
 public:
  void record(cudaError_t e, const std::string &where) {
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess) return;
    char when[32] = "an unknown time";
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    if (gmtime_r(&now, &utc)) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &utc);
    std::lock_guard<std::mutex> lock(mutex_);
    if (by_device_.count(device)) return;
    by_device_[device] = std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + "), reported at " + when +
                         " by " + where;
    any_.store(true, std::memory_order_release);
  }

  // Throws for a device that had a sticky fault; one atomic load otherwise.
  void check_usable(int device) {
    if (!any_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = by_device_.find(device);
    if (found == by_device_.end()) return;
    fail(KILN_ERROR_BACKEND, "cuda:" + std::to_string(device) + " is unusable after a fatal GPU fault: " +
                                 found->second +
                                 ". The device's CUDA context is lost for this process: restart the process");
  }

 private:
  std::atomic<bool> any_{false};
  std::mutex mutex_;
  std::map<int, std::string> by_device_;
};

inline Faults &faults() {
  static Faults f;
  return f;
}

[[noreturn]] inline void fail_cuda(cudaError_t e, const char *call, const std::string &context,
                                   kiln_status status = KILN_ERROR_BACKEND) {
  cudaGetLastError();  // clear a non-sticky error so the backend stays usable
  const std::string in = context.empty() ? "" : " (" + context + ")";
  if (is_sticky(e)) faults().record(e, call_name(call) + in);
  if (e == cudaErrorMemoryAllocation) status = KILN_ERROR_OUT_OF_MEMORY;
  if (e == cudaErrorDevicesUnavailable || e == cudaErrorInvalidDevice) status = KILN_ERROR_DEVICE_UNAVAILABLE;
  fail(status, call_name(call) + " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + in);
}

// cuBLAS reports a lost context as a failed execution; the CUDA error behind
// it, if sticky, is recorded as for a CUDA call.
[[noreturn]] inline void fail_cublas(cublasStatus_t s, const char *call, const std::string &context) {
  const cudaError_t cuda = cudaPeekAtLastError();
  const std::string in = context.empty() ? "" : " (" + context + ")";
  if (is_sticky(cuda)) faults().record(cuda, call_name(call) + in);
  kiln_status status = s == CUBLAS_STATUS_ALLOC_FAILED ? KILN_ERROR_OUT_OF_MEMORY : KILN_ERROR_BACKEND;
  fail(status, call_name(call) + " failed: " + cublasGetStatusName(s) + in);
}

}  // namespace kiln::cuda

#define KILN_CUDA_TRY(call, context)                                       \
  do {                                                                     \
    cudaError_t kiln_e_ = (call);                                          \
    if (kiln_e_ != cudaSuccess) ::kiln::cuda::fail_cuda(kiln_e_, #call, context); \
  } while (0)

// As KILN_CUDA_TRY, with the kiln_status a failure maps to (out of memory
// stays OUT_OF_MEMORY, an unavailable device DEVICE_UNAVAILABLE).
#define KILN_CUDA_TRY_AS(call, status, context)                                    \
  do {                                                                             \
    cudaError_t kiln_e_ = (call);                                                  \
    if (kiln_e_ != cudaSuccess) ::kiln::cuda::fail_cuda(kiln_e_, #call, context, status); \
  } while (0)

#define KILN_CUBLAS_TRY(call, context)                                         \
  do {                                                                         \
    cublasStatus_t kiln_s_ = (call);                                           \
    if (kiln_s_ != CUBLAS_STATUS_SUCCESS) ::kiln::cuda::fail_cublas(kiln_s_, #call, context); \
  } while (0)

// After a kernel launch: a bad configuration or an earlier asynchronous fault.
#define KILN_CUDA_LAUNCHED(kernel_name) KILN_CUDA_TRY(cudaGetLastError(), std::string("launch of ") + (kernel_name))
