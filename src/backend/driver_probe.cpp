#include "backend/driver_probe.hpp"

#include <dlfcn.h>

#include <cstdlib>

namespace kiln {

namespace {

// The driver API's own signatures (cuda.h): CUresult is an int-sized enum.
using InitFn = int (*)(unsigned int);
using ErrorNameFn = int (*)(int, const char **);
using DeviceCountFn = int (*)(int *);
constexpr int kCudaErrorNoDevice = 100;  // CUDA_ERROR_NO_DEVICE

// The driver library, loaded (or why not) and its cuInit run once here.
struct Driver {
  void *lib = nullptr;
  std::string where;    // the file the loader found, or the name asked for
  std::string missing;  // set when the library or cuInit is not there: the whole reason
  int init_result = -1;
  ErrorNameFn error_name = nullptr;
};

Driver open_driver(const char *library) {
  Driver d;
  d.where = library;
  dlerror();
  d.lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!d.lib) {
    const char *error = dlerror();
    d.missing = std::string(library) + " not found (" + std::string(error ? error : "dlopen failed").substr(0, 300) + ")";
    return d;
  }
  auto init = reinterpret_cast<InitFn>(dlsym(d.lib, "cuInit"));
  d.error_name = reinterpret_cast<ErrorNameFn>(dlsym(d.lib, "cuGetErrorName"));
  Dl_info info{};
  if (init && dladdr(reinterpret_cast<void *>(init), &info) && info.dli_fname) d.where = info.dli_fname;
  if (!init) {
    d.missing = d.where + " was found but has no cuInit (not an NVIDIA driver library)";
    return d;
  }
  d.init_result = init(0);
  return d;
}

std::string init_failure(const Driver &d) {
  const char *name = nullptr;
  if (!d.error_name || d.error_name(d.init_result, &name) != 0 || !name) name = "an unknown CUresult";
  return d.where + " was found but cuInit failed with " + name + " (" + std::to_string(d.init_result) + ")";
}

std::string visible_devices_text() {
  const char *visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return visible ? std::string(" (CUDA_VISIBLE_DEVICES=\"") + visible + "\")" : "";
}

}  // namespace

std::string describe_driver_failure(const char *library) {
  const Driver d = open_driver(library);
  if (!d.missing.empty()) return d.missing;
  if (d.init_result == 0) return d.where + " was found and cuInit succeeded, yet the CUDA runtime could not use it";
  return init_failure(d);
}

std::string cuda_driver_unavailable(const char *library) {
  const Driver d = open_driver(library);
  if (!d.missing.empty()) return "no CUDA driver: " + d.missing;
  if (d.init_result == kCudaErrorNoDevice) return "no CUDA device found" + visible_devices_text() + ": " + init_failure(d);
  if (d.init_result != 0) return "no CUDA driver: " + init_failure(d);
  auto count_fn = reinterpret_cast<DeviceCountFn>(dlsym(d.lib, "cuDeviceGetCount"));
  if (!count_fn) return "no CUDA driver: " + d.where + " was found but has no cuDeviceGetCount";
  int count = 0;
  const int result = count_fn(&count);
  if (result != 0) {
    const char *name = nullptr;
    if (!d.error_name || d.error_name(result, &name) != 0 || !name) name = "an unknown CUresult";
    return "cannot use CUDA: cuDeviceGetCount of " + d.where + " failed with " + name + " (" + std::to_string(result) +
           ")";
  }
  if (count <= 0) return "no CUDA device found" + visible_devices_text() + ": cuDeviceGetCount of " + d.where + " counts 0";
  return "";
}

}  // namespace kiln
