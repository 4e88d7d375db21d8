// cudnn_library(): dlopen, dlsym and the version checks; see the header.
#include "backend/cuda/cudnn_library.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <type_traits>

namespace kiln::cuda {
namespace {

CudnnLibrary load() {
  CudnnLibrary l;
  const char *dir = std::getenv("KILN_CUDNN_PATH");
  const bool from_env = dir && *dir;
  const std::string name = from_env ? std::string(dir) + "/libcudnn.so.9" : "libcudnn.so.9";
  void *lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    l.reason = "cannot load " + name + ": " + (e ? e : "unknown error") +
               (from_env ? "" : " (put the folder of libcudnn.so.9, e.g. site-packages/nvidia/cudnn/lib, in "
                                "LD_LIBRARY_PATH or KILN_CUDNN_PATH)");
    return l;
  }
  std::string missing;
  auto resolve = [&](auto &fn, const char *symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
    if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(symbol);
  };
  CudnnApi &a = l.api;
  resolve(a.GetVersion, "cudnnGetVersion");
  resolve(a.GetCudartVersion, "cudnnGetCudartVersion");
  resolve(a.GetErrorString, "cudnnGetErrorString");
  resolve(a.Create, "cudnnCreate");
  resolve(a.Destroy, "cudnnDestroy");
  resolve(a.SetStream, "cudnnSetStream");
  resolve(a.CreateDescriptor, "cudnnBackendCreateDescriptor");
  resolve(a.DestroyDescriptor, "cudnnBackendDestroyDescriptor");
  resolve(a.SetAttribute, "cudnnBackendSetAttribute");
  resolve(a.GetAttribute, "cudnnBackendGetAttribute");
  resolve(a.Finalize, "cudnnBackendFinalize");
  resolve(a.Execute, "cudnnBackendExecute");
  resolve(a.CreateTensorDescriptor, "cudnnCreateTensorDescriptor");
  resolve(a.SetTensor4dDescriptor, "cudnnSetTensor4dDescriptor");
  resolve(a.DestroyTensorDescriptor, "cudnnDestroyTensorDescriptor");
  resolve(a.SoftmaxForward, "cudnnSoftmaxForward");
  if (missing.empty()) {
    // cuDNN 9 numbers versions major*10000 + minor*100 + patch (8 used
    // major*1000 + ...), and the CUDA runtime as major*1000 + minor*10.
    const size_t version = a.GetVersion(), cudart = a.GetCudartVersion();
    const std::string text = std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
                             std::to_string(version % 100);
    if (version / 10000 != CUDNN_MAJOR)
      l.reason = name + " is cuDNN " + text + " (version number " + std::to_string(version) + "); kiln needs cuDNN " +
                 std::to_string(CUDNN_MAJOR);
    else if (cudart / 1000 != CUDART_VERSION / 1000)
      l.reason = name + " (cuDNN " + text + ") is built for CUDA " + std::to_string(cudart / 1000) +
                 "; libkiln_cuda uses CUDA " + std::to_string(CUDART_VERSION / 1000) + " (install nvidia-cudnn-cu" +
                 std::to_string(CUDART_VERSION / 1000) + ")";
  } else {
    l.reason = name + " lacks " + missing;
  }
  // An unusable library is let go; a usable one stays loaded for the process
  // (handles and plans may live until exit, and unloading buys nothing).
  if (!l.reason.empty()) {
    dlclose(lib);
    l.api = CudnnApi{};
  }
  if (l.reason.empty()) l.version = a.GetVersion();
  return l;
}

}  // namespace

const CudnnLibrary &cudnn_library() {
  static const CudnnLibrary l = load();
  return l;
}

std::string status_text(const CudnnApi &api, cudnnStatus_t s) {
  return std::string(api.GetErrorString(s)) + " (" + std::to_string(int(s)) + ")";
}

kiln_status status_of(cudnnStatus_t s) {
  switch (s) {
    case CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED:  // also the deprecated CUDNN_STATUS_ALLOC_FAILED
    case CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED:
      return KILN_ERROR_OUT_OF_MEMORY;
    default:
      return KILN_ERROR_BACKEND;
  }
}

}  // namespace kiln::cuda
