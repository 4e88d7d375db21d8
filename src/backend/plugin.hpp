// The contract between libkiln and the CUDA plugin, libkiln_cuda.so. The
// plugin exports two C symbols; libkiln dlopen()s it once per process (the
// registry, backend/registry.cpp) and refuses a plugin built against other
// interface headers.
#pragma once

#include <cstdint>

#include "core/backend.hpp"
// kiln::kBackendInterfaceVersion, which CMake derives from a hash of the
// interface headers (KILN_BACKEND_INTERFACE_HEADERS in CMakeLists.txt), so
// any change to them makes an older plugin refuse to load.
#include "kiln/backend_version.hpp"

extern "C" {
// Returns kiln::kBackendInterfaceVersion as the plugin was built.
typedef int (*kiln_backend_interface_version_fn)(void);
// Creates the CUDA backend, or returns null and writes why (no driver, no
// device, driver too old) into reason[0..reason_size). Never throws.
typedef kiln::Backend *(*kiln_backend_cuda_create_fn)(char *reason, int64_t reason_size);
}
