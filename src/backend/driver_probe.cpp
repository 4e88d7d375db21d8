#include "backend/driver_probe.hpp"

#include <dlfcn.h>

namespace kiln {

std::string describe_driver_failure(const char *library) {
  dlerror();
  void *lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *error = dlerror();
    return std::string(library) + " not found (" + std::string(error ? error : "dlopen failed").substr(0, 300) + ")";
  }
  // The driver API's own signatures (cuda.h): CUresult is an int-sized enum.
  using InitFn = int (*)(unsigned int);
  using ErrorNameFn = int (*)(int, const char **);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
  auto error_name = reinterpret_cast<ErrorNameFn>(dlsym(lib, "cuGetErrorName"));
  std::string where = library;
  Dl_info info{};
  if (init && dladdr(reinterpret_cast<void *>(init), &info) && info.dli_fname) where = info.dli_fname;
  if (!init) return where + " was found but has no cuInit (not an NVIDIA driver library)";
  const int result = init(0);
  if (result == 0) return where + " was found and cuInit succeeded, yet the CUDA runtime could not use it";
  const char *name = nullptr;
  if (!error_name || error_name(result, &name) != 0 || !name) name = "an unknown CUresult";
  return where + " was found but cuInit failed with " + name + " (" + std::to_string(result) + ")";
}

}  // namespace kiln
