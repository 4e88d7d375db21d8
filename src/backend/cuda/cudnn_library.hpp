// libcudnn.so.9, opened at run time. The plugin never links cuDNN, so that
// it loads and works where cuDNN is missing: the first call of
// cudnn_library() dlopen()s $KILN_CUDNN_PATH/libcudnn.so.9 when that variable
// is set (only there), else "libcudnn.so.9" through the dynamic loader's
// search (LD_LIBRARY_PATH, then the plugin's RUNPATH, then the system cache),
// resolves every function kiln uses with dlsym and checks the versions. Any
// failure leaves the library unusable with a reason; it is never an error.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn_graph.h>
#include <cudnn_ops.h>

#include <cstddef>
#include <string>

#include "kiln/kiln.h"

namespace kiln::cuda {

// The functions of libcudnn.so.9 kiln uses (null where unusable).
struct CudnnApi {
  decltype(&cudnnGetVersion) GetVersion = nullptr;
  decltype(&cudnnGetCudartVersion) GetCudartVersion = nullptr;
  decltype(&cudnnGetErrorString) GetErrorString = nullptr;
  decltype(&cudnnCreate) Create = nullptr;
  decltype(&cudnnDestroy) Destroy = nullptr;
  decltype(&cudnnSetStream) SetStream = nullptr;
  decltype(&cudnnBackendCreateDescriptor) CreateDescriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) DestroyDescriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) SetAttribute = nullptr;
  decltype(&cudnnBackendGetAttribute) GetAttribute = nullptr;
  decltype(&cudnnBackendFinalize) Finalize = nullptr;
  decltype(&cudnnBackendExecute) Execute = nullptr;
  decltype(&cudnnCreateTensorDescriptor) CreateTensorDescriptor = nullptr;
  decltype(&cudnnSetTensor4dDescriptor) SetTensor4dDescriptor = nullptr;
  decltype(&cudnnDestroyTensorDescriptor) DestroyTensorDescriptor = nullptr;
  decltype(&cudnnSoftmaxForward) SoftmaxForward = nullptr;
};

struct CudnnLibrary {
  CudnnApi api;
  size_t version = 0;  // cudnnGetVersion(), e.g. 91900 for 9.19.0; 0 when not loaded
  std::string reason;  // empty: usable
};

// The process's cuDNN, loaded on the first call (thread-safe), kept for the
// process's life when usable (handles and plans may live until exit).
const CudnnLibrary &cudnn_library();

// "CUDNN_STATUS_BAD_PARAM (2000)"; the library must be usable.
std::string status_text(const CudnnApi &api, cudnnStatus_t s);

// The kiln_status a failed cuDNN call becomes: OUT_OF_MEMORY for its host
// and device allocation failures (so the caller sees what it can act on, as
// for CUDA and cuBLAS), BACKEND for everything else.
kiln_status status_of(cudnnStatus_t s);

}  // namespace kiln::cuda
