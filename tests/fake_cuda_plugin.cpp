// A stand-in for libkiln_cuda.so that never makes a backend, so the plugin
// loader's refusals can be tested on any machine: test_context points
// KILN_BACKEND_PATH at the directory holding it.
//
// It is built three times (tests/CMakeLists.txt): with this build's ID, as
// the real plugin has; with KILN_FAKE_PLUGIN_BUILD_ID set to another ID, as
// a plugin from another build would have; and with
// KILN_FAKE_PLUGIN_NO_BUILD_ID, without one, as a plugin of a kiln older than
// build IDs. Its create function always fails with a reason that names it.
#include <cstdio>

#include "backend/plugin.hpp"
#include "kiln/build_id.hpp"

#ifndef KILN_FAKE_PLUGIN_BUILD_ID
#define KILN_FAKE_PLUGIN_BUILD_ID KILN_BUILD_ID
#endif

extern "C" {

#ifndef KILN_FAKE_PLUGIN_NO_BUILD_ID
__attribute__((visibility("default"))) const char *kiln_plugin_build_id(void) { return KILN_FAKE_PLUGIN_BUILD_ID; }
#endif

__attribute__((visibility("default"))) kiln::Backend *kiln_backend_cuda_create(char *reason, int64_t reason_size) {
  std::snprintf(reason, size_t(reason_size), "fake plugin: no CUDA driver on this test machine");
  return nullptr;
}

}  // extern "C"
