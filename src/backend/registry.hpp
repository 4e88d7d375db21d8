// The backend registry: which backends exist and how each is made. The CPU
// backend is built in; the CUDA backend comes from the plugin libkiln_cuda.so
// (backend/plugin.hpp), loaded once per process by the first context that
// wants it and never unloaded.
#pragma once

#include <initializer_list>
#include <string>

#include "core/backend_registry.hpp"

namespace kiln {

class Context;

// The registry of the process. Thread-safe.
BackendRegistry &backend_registry();

// The directory libkiln's plugins (libkiln_cuda.so, and libkiln_dist.so for
// distributed training) are loaded from: KILN_BACKEND_PATH when set, else
// libkiln's own directory; "" when neither is known (then the dynamic loader
// searches). *origin says which, for messages.
std::string plugin_directory(std::string *origin);
// text (a loader or engine message) on one line, without trailing spaces.
std::string one_line(const char *text);

// An optional plugin (libkiln_dist.so, libkiln_onnx.so) opened from
// plugin_directory() and checked: it has every symbol asked for, and its
// version_symbol (an int (*)(void)) returns the interface version libkiln
// was built with. Opened RTLD_NODELETE and never closed: what the plugin's
// libraries register (MPI's exit handler, protobuf's descriptor tables)
// must outlive every use.
struct PluginLibrary {
  void *handle = nullptr;  // null when it cannot be used
  std::string error;       // then why, naming the file: for the caller's status
  void *symbol(const char *name) const;
};
// file: "libkiln_dist.so"; what: "distributed", for messages; needs: what
// the plugin's own libraries are and where they come from, added to a
// loader failure. Logs the attempt at DEBUG.
PluginLibrary open_plugin(const Context &ctx, const char *file, const char *what, const char *needs,
                          const char *version_symbol, int version, std::initializer_list<const char *> symbols);

}  // namespace kiln
