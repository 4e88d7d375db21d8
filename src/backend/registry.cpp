// The backend registry: CPU backends per context, and the CUDA plugin's one
// backend per process (found, checked and created here, once).
#include "backend/registry.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/driver_probe.hpp"
#include "backend/plugin.hpp"
#include "core/context.hpp"

namespace kiln {

namespace {

constexpr const char *kPluginName = "libkiln_cuda.so";
constexpr const char *kDriverName = "libcuda.so.1";

// Any function of libkiln: dladdr on it names the file libkiln was loaded from.
void locate_libkiln() {}

}  // namespace

std::string plugin_directory(std::string *origin) {
  const char *env = std::getenv("KILN_BACKEND_PATH");
  if (env && *env) {
    *origin = "KILN_BACKEND_PATH";
    return env;
  }
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&locate_libkiln), &info) && info.dli_fname) {
    std::string file = info.dli_fname;
    size_t slash = file.rfind('/');
    if (slash != std::string::npos) {
      *origin = "the directory of libkiln";
      return file.substr(0, slash == 0 ? 1 : slash);
    }
  }
  *origin = "the dynamic loader's search path";
  return "";
}

void *PluginLibrary::symbol(const char *name) const { return dlsym(handle, name); }

PluginLibrary open_plugin(const Context &ctx, const char *file, const char *what, const char *needs,
                          const char *version_symbol, int version, std::initializer_list<const char *> symbols) {
  PluginLibrary p;
  std::string origin;
  const std::string dir = plugin_directory(&origin);
  const std::string path = dir.empty() ? file : dir + "/" + file;
  ctx.log(KILN_LOG_DEBUG, std::string("loading the ") + what + " plugin " + path + " (from " + origin + ")");
  void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!library) {
    p.error = std::string("cannot load the ") + what + " plugin " + path + " (from " + origin +
              "): " + one_line(dlerror()) + "; " + needs;
    return p;
  }
  const std::string name = std::string("the ") + what + " plugin " + path;
  for (const char *symbol : symbols)
    if (!dlsym(library, symbol)) {
      p.error = name + " is not kiln's: it lacks " + symbol;
      return p;
    }
  auto version_fn = reinterpret_cast<int (*)(void)>(dlsym(library, version_symbol));
  if (!version_fn) {
    p.error = name + " is not kiln's: it lacks " + version_symbol;
    return p;
  }
  if (version_fn() != version) {
    std::string stem = file;
    stem = stem.substr(0, stem.rfind(".so"));
    p.error = name + " was built for interface " + std::to_string(version_fn()) + ", this library expects " +
              std::to_string(version) + " (install libkiln and " + stem + " from the same build)";
    return p;
  }
  p.handle = library;
  return p;
}

std::string one_line(const char *text) {
  std::string s = text ? text : "";
  for (char &c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

namespace {

// Probes the driver, then looks for the plugin, checks it and asks it for
// the backend.
//
// The plugin is never dlclose()d, not even when it is refused or declines:
// by then its initialisers, the static CUDA runtime's and cuBLAS's may have
// started threads or registered callbacks that still point into its code, so
// unmapping it is unsafe while anything of it may run, and loading it again
// would cost the CUDA runtime's start-up (hundreds of milliseconds) each time.
// It is loaded at most once per process, so keeping it costs one mapping.
CudaBackendLoad load_cuda_plugin() {
  CudaBackendLoad load;
  std::string origin;
  const std::string dir = plugin_directory(&origin);
  std::string path = dir.empty() ? kPluginName : dir + "/" + kPluginName;
  load.searched = path + " (from " + origin + ")";

  // The driver first: without a device the plugin has nothing to do, and
  // loading it maps the CUDA runtime, cuBLAS and cuBLASLt and runs their
  // initialisers (about 200 MB and a good part of a second), which every
  // program asking for the default device on a machine without a GPU would
  // pay. The reason is the driver's own, as the plugin would give it.
  load.reason = cuda_driver_unavailable(kDriverName);
  if (!load.reason.empty()) {
    load.searched += ", not loaded: the CUDA driver has no usable device";
    return load;
  }

  struct stat st {};
  if (!dir.empty() && stat(path.c_str(), &st) != 0) {
    load.reason = std::string(kPluginName) + " not found in " + dir + " (" + origin +
                  "): " + std::strerror(errno);
    return load;
  }
  void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    load.reason = "cannot load the CUDA plugin " + path + ": " + one_line(dlerror());
    return load;
  }

  auto version_fn =
      reinterpret_cast<kiln_backend_interface_version_fn>(dlsym(library, "kiln_backend_interface_version"));
  auto create_fn = reinterpret_cast<kiln_backend_cuda_create_fn>(dlsym(library, "kiln_backend_cuda_create"));
  if (!version_fn || !create_fn) {
    load.reason = "the CUDA plugin " + path + " is not a kiln backend: it lacks " +
                  (version_fn ? "kiln_backend_cuda_create" : "kiln_backend_interface_version");
    load.broken_installation = true;
    return load;
  }
  int version = version_fn();
  if (version != kBackendInterfaceVersion) {
    load.reason = "the CUDA plugin " + path + " was built for interface " + std::to_string(version) +
                  ", this library expects " + std::to_string(kBackendInterfaceVersion) +
                  " (install libkiln and libkiln_cuda from the same build)";
    load.broken_installation = true;
    return load;
  }

  char reason[512] = {};
  Backend *backend = nullptr;
  try {
    backend = create_fn(reason, sizeof reason);
  } catch (const std::exception &e) {  // the plugin promises not to throw; do not trust it with our caller
    std::snprintf(reason, sizeof reason, "%s", e.what());
  } catch (...) {
    std::snprintf(reason, sizeof reason, "unknown exception while creating the CUDA backend");
  }
  reason[sizeof reason - 1] = '\0';
  if (!backend) {
    load.reason = one_line(reason);
    if (load.reason.empty()) load.reason = "the CUDA plugin " + path + " gave no backend and no reason";
    return load;
  }
  // Never deleted: it lives until the process exits, when the CUDA runtime
  // tears itself down in its own order and the driver reclaims the memory.
  load.backend = backend;
  if (backend->device_count() == 0) load.reason = "the CUDA backend loaded but no CUDA device is visible";
  return load;
}

class ProcessRegistry final : public BackendRegistry {
 public:
  std::unique_ptr<Backend> make_cpu(int64_t threads) override { return make_cpu_backend(threads); }

  const CudaBackendLoad &cuda() override {
    // call_once: contexts created at once on several threads load the plugin
    // once, and all wait for that one load. If it throws (out of memory),
    // the next context tries again.
    std::call_once(cuda_once_, [this] { cuda_ = load_cuda_plugin(); });
    return cuda_;
  }

 private:
  std::once_flag cuda_once_;
  CudaBackendLoad cuda_;
};

}  // namespace

BackendRegistry &backend_registry() {
  // Never destroyed, so that a context created while static objects are
  // being destroyed at exit (from a binding's finalizer) still finds it.
  static ProcessRegistry *registry = new ProcessRegistry;
  return *registry;
}

}  // namespace kiln
