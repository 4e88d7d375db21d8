// The build identity every plugin exports (plugin/loader.hpp): a source of
// libkiln_cuda.so, libkiln_dist.so and libkiln_onnx.so, never of libkiln
// itself, whose loader compares the plugin's answer with its own
// KILN_BUILD_ID.
#include "kiln/build_id.hpp"

extern "C" __attribute__((visibility("default"))) const char *kiln_plugin_build_id(void) { return KILN_BUILD_ID; }
