// A stand-in for libkiln_cuda.so that never makes a backend, so the plugin
// loader's refusals can be tested on any machine: test_context points
// KILN_BACKEND_PATH at the directory holding it.
//
// It claims kiln's current interface version, or another one when the
// environment has KILN_FAKE_PLUGIN_MISMATCH=1; its create function always
// fails with a reason that names it.
#include <cstdio>
#include <cstdlib>

#include "backend/plugin.hpp"

extern "C" {

__attribute__((visibility("default"))) int kiln_backend_interface_version(void) {
  const char *mismatch = std::getenv("KILN_FAKE_PLUGIN_MISMATCH");
  return mismatch && mismatch[0] == '1' ? kiln::kBackendInterfaceVersion + 1000 : kiln::kBackendInterfaceVersion;
}

__attribute__((visibility("default"))) kiln::Backend *kiln_backend_cuda_create(char *reason, int64_t reason_size) {
  std::snprintf(reason, size_t(reason_size), "fake plugin: no CUDA driver on this test machine");
  return nullptr;
}

}  // extern "C"
