// What a context asks of the backend registry. Which backends exist, and how
// they are made, is decided by the registry in src/backend
// (backend/registry.hpp), which implements this interface; core sees only
// this, so it includes nothing above itself. The C API (src/api), where the
// layers are put together, hands the registry to Context::create.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/backend.hpp"

namespace kiln {

// The outcome of looking for the CUDA backend. There is one per process:
// made by the first context that wants CUDA, then shared by every context.
struct CudaBackendLoad {
  // Null when CUDA is unavailable. Otherwise the one CUDA backend of the
  // process (all devices, one memory pool per device); never destroyed.
  Backend *backend = nullptr;
  // Why CUDA is unavailable: the loader's, plugin's or driver's message;
  // "" when the backend has at least one device.
  std::string reason;
  // A plugin was found but cannot be used as installed (not a kiln backend,
  // another interface version): worth a warning, unlike a missing plugin or
  // driver, which is normal on a machine without a GPU.
  bool broken_installation = false;
  // Where the plugin was looked for and why there, for a debug message.
  std::string searched;
};

class BackendRegistry {
 public:
  virtual ~BackendRegistry() = default;
  // A new CPU backend with its own thread pool: threads >= 1, or 0 for one
  // per core.
  virtual std::unique_ptr<Backend> make_cpu(int64_t threads) = 0;
  // The process's CUDA backend, or why there is none. The first call looks
  // for the plugin; concurrent first calls wait for it, and every call
  // returns the same object, valid until the process exits.
  virtual const CudaBackendLoad &cuda() = 0;
};

}  // namespace kiln
