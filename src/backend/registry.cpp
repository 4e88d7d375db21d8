// The backend registry: CPU backends per context, and the CUDA plugin's one
// backend per process (found, checked and created here, once).
#include "backend/registry.hpp"

#include <cstdio>
#include <exception>
#include <mutex>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/driver_probe.hpp"
#include "backend/plugin.hpp"
#include "plugin/loader.hpp"

namespace kiln {

namespace {

constexpr const char *kPluginFile = "libkiln_cuda.so";

// Probes the driver, then looks for the plugin, checks it (plugin/loader.hpp:
// never closed, even when it is refused or declines, since the static CUDA
// runtime and cuBLAS may have started threads that run its code) and asks it
// for the backend.
CudaBackendLoad load_cuda_plugin() {
  CudaBackendLoad load;
  // The driver first: without a device the plugin has nothing to do, and
  // loading it maps the CUDA runtime, cuBLAS and cuBLASLt and runs their
  // initialisers (about 200 MB and a good part of a second), which every
  // program asking for the default device on a machine without a GPU would
  // pay. The reason is the driver's own, as the plugin would give it.
  load.reason = cuda_driver_unavailable("libcuda.so.1");
  if (!load.reason.empty()) {
    std::string origin;
    const std::string dir = plugin_directory(&origin);
    load.searched = (dir.empty() ? std::string(kPluginFile) : dir + "/" + kPluginFile) + " (from " + origin +
                    "), not loaded: the CUDA driver probe failed (the reason follows)";
    return load;
  }
  const PluginLibrary library = open_plugin({kPluginFile, "CUDA", "", {"kiln_backend_cuda_create"}});
  load.searched = library.searched;
  if (!library.handle) {
    load.reason = library.error;
    load.broken_installation = library.refused;
    return load;
  }
  auto create_fn = reinterpret_cast<kiln_backend_cuda_create_fn>(library.symbol("kiln_backend_cuda_create"));

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
    if (load.reason.empty()) load.reason = "the CUDA plugin " + library.searched + " gave no backend and no reason";
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
