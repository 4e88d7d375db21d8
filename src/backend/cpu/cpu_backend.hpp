// The CPU backend: host memory, OpenBLAS for matrix products, kiln's own
// vectorised kernels for everything else, run on a persistent thread pool.
#pragma once

#include <cstdint>
#include <memory>

#include "core/backend.hpp"

namespace kiln {

// threads >= 1, or 0 for one per core available to the process. The backend
// owns its thread pool; it serves the one CPU device, index -1.
std::unique_ptr<Backend> make_cpu_backend(int64_t threads);

}  // namespace kiln
