// Turns CUDA runtime and cuBLAS failures into kiln::Error. Every call into
// CUDA goes through one of these macros; the context argument (any
// std::string expression) is only evaluated when the call failed, so
// checking costs nothing on the fast path.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <string>

#include "core/error.hpp"

namespace kiln::cuda {

// "cudaMemcpyAsync(dst, ...)" -> "cudaMemcpyAsync"
inline std::string call_name(const char *call) {
  std::string s = call;
  return s.substr(0, s.find('('));
}

[[noreturn]] inline void fail_cuda(cudaError_t e, const char *call, const std::string &context) {
  cudaGetLastError();  // clear a non-sticky error so the backend stays usable
  kiln_status status = e == cudaErrorMemoryAllocation ? KILN_ERROR_OUT_OF_MEMORY : KILN_ERROR_BACKEND;
  fail(status, call_name(call) + " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) +
                   (context.empty() ? "" : " (" + context + ")"));
}

[[noreturn]] inline void fail_cublas(cublasStatus_t s, const char *call, const std::string &context) {
  kiln_status status = s == CUBLAS_STATUS_ALLOC_FAILED ? KILN_ERROR_OUT_OF_MEMORY : KILN_ERROR_BACKEND;
  fail(status, call_name(call) + " failed: " + cublasGetStatusName(s) + (context.empty() ? "" : " (" + context + ")"));
}

}  // namespace kiln::cuda

#define KILN_CUDA_TRY(call, context)                                       \
  do {                                                                     \
    cudaError_t kiln_e_ = (call);                                          \
    if (kiln_e_ != cudaSuccess) ::kiln::cuda::fail_cuda(kiln_e_, #call, context); \
  } while (0)

#define KILN_CUBLAS_TRY(call, context)                                         \
  do {                                                                         \
    cublasStatus_t kiln_s_ = (call);                                           \
    if (kiln_s_ != CUBLAS_STATUS_SUCCESS) ::kiln::cuda::fail_cublas(kiln_s_, #call, context); \
  } while (0)

// After a kernel launch: a bad configuration or an earlier asynchronous fault.
#define KILN_CUDA_LAUNCHED(kernel_name) KILN_CUDA_TRY(cudaGetLastError(), std::string("launch of ") + (kernel_name))
