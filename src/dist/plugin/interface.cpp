// libkiln_dist.so's version entry point, whichever engines it was built with
// (src/dist/plugin.hpp).
#include "dist/plugin.hpp"

extern "C" __attribute__((visibility("default"))) int kiln_dist_interface_version(void) {
  return kiln::kDistInterfaceVersion;
}
