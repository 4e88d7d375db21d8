// A stand-in for libkiln_cuda.so that never makes a backend, so the plugin
// loader's refusals can be tested on any machine: test_context points
// KILN_BACKEND_PATH at the directory holding it.
//
// It is built twice (tests/CMakeLists.txt): once claiming the interface
// version of this build, as the real plugin does, and once with
// KILN_FAKE_PLUGIN_INTERFACE_VERSION set to another version, as a plugin from
// another build would. Its create function always fails with a reason that
// names it.
#include <cstdio>

#include "backend/plugin.hpp"

#ifndef KILN_FAKE_PLUGIN_INTERFACE_VERSION
#define KILN_FAKE_PLUGIN_INTERFACE_VERSION kiln::kBackendInterfaceVersion
#endif

extern "C" {

__attribute__((visibility("default"))) int kiln_backend_interface_version(void) {
  return KILN_FAKE_PLUGIN_INTERFACE_VERSION;
}

__attribute__((visibility("default"))) kiln::Backend *kiln_backend_cuda_create(char *reason, int64_t reason_size) {
  std::snprintf(reason, size_t(reason_size), "fake plugin: no CUDA driver on this test machine");
  return nullptr;
}

}  // extern "C"
