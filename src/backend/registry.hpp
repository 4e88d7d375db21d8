// The backend registry: which backends exist and how each is made. The CPU
// backend is built in; the CUDA backend comes from the plugin libkiln_cuda.so
// (backend/plugin.hpp), loaded once per process by the first context that
// wants it and never unloaded.
#pragma once

#include <string>

#include "core/backend_registry.hpp"

namespace kiln {

// The registry of the process. Thread-safe.
BackendRegistry &backend_registry();

// The directory libkiln's plugins (libkiln_cuda.so, and libkiln_dist.so for
// distributed training) are loaded from: KILN_BACKEND_PATH when set, else
// libkiln's own directory; "" when neither is known (then the dynamic loader
// searches). *origin says which, for messages.
std::string plugin_directory(std::string *origin);
// text (a loader or engine message) on one line, without trailing spaces.
std::string one_line(const char *text);

}  // namespace kiln
