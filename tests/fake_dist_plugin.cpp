// A libkiln_dist.so of another build, for the plugin loader's refusal
// (test_communicator_other_build): it calls an internal function of its own
// build's libkiln (tests/other_build_libkiln.cpp), so it needs that build's
// private version node, and it reports that build's ID. Neither entry point
// ever runs.
#include <cstdio>

#include "distributed/plugin.hpp"

namespace kiln {
void other_build_internal();
}  // namespace kiln

extern "C" {

__attribute__((visibility("default"))) const char *kiln_plugin_build_id(void) { return KILN_FAKE_PLUGIN_BUILD_ID; }

__attribute__((visibility("default"))) kiln::Collective *kiln_dist_create_mpi(kiln_status *status, char *reason,
                                                                              int64_t reason_size) {
  kiln::other_build_internal();
  *status = KILN_ERROR_INTERNAL;
  std::snprintf(reason, size_t(reason_size), "fake plugin of another build");
  return nullptr;
}

__attribute__((visibility("default"))) kiln_status kiln_dist_create_local(const int64_t *devices, int64_t count,
                                                                          kiln::Collective **out, char *reason,
                                                                          int64_t reason_size) {
  kiln::other_build_internal();
  std::snprintf(reason, size_t(reason_size), "fake plugin of another build");
  return KILN_ERROR_INTERNAL;
}

}  // extern "C"
