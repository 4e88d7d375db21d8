// The backend registry: which backends exist and how each is made. The CPU
// backend is built in; the CUDA backend comes from the plugin libkiln_cuda.so
// (backend/plugin.hpp), loaded through plugin/loader.hpp once per process,
// by the first context that wants it, and never unloaded.
#pragma once

#include "core/backend_registry.hpp"

namespace kiln {

// The registry of the process. Thread-safe.
BackendRegistry &backend_registry();

}  // namespace kiln
