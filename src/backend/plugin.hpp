// The contract between libkiln and the CUDA plugin, libkiln_cuda.so. The
// plugin exports one entry point besides its build ID; libkiln loads it
// once per process (the registry, backend/registry.cpp, through
// plugin/loader.hpp, which refuses a plugin of another build).
#pragma once

#include <cstdint>

#include "core/backend.hpp"

extern "C" {
// Creates the CUDA backend, or returns null and writes why (no driver, no
// device, driver too old) into reason[0..reason_size). Never throws.
typedef kiln::Backend *(*kiln_backend_cuda_create_fn)(char *reason, int64_t reason_size);
}
