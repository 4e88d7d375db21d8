// The one plugin loader (DESIGN.md, "Plugins"). libkiln's three plugins,
// libkiln_cuda.so (backend/plugin.hpp), libkiln_dist.so
// (distributed/plugin.hpp) and libkiln_onnx.so (onnx/plugin.hpp), are found,
// opened and checked here, the same way: from one directory, once per
// process, never unloaded, and refused unless they export every entry point
// asked for and come from the same build as libkiln.
//
// The identity rule: a build ID, computed at build time over every header of
// kiln and the compiler (cmake/build_id.cmake), is compiled into libkiln and
// into each plugin, which exports it as
//     extern "C" const char *kiln_plugin_build_id(void);
// (plugin/identity.cpp, a source of every plugin). A plugin whose ID differs
// is refused with both IDs in the message. The plugins use libkiln's own
// internal symbols (one copy in a process), exported under a version node
// named after the same ID, so the dynamic loader already refuses a plugin of
// another build that links them; see docs/plugins.md. Each plugin's own file
// knows only its entry points and what to say when its libraries are
// missing.
#pragma once

#include <initializer_list>
#include <string>

namespace kiln {

// The directory plugins are loaded from: KILN_BACKEND_PATH when set, else
// libkiln's own directory; "" when neither is known (then the dynamic loader
// searches). *origin says which, for messages.
std::string plugin_directory(std::string *origin);
// text (a loader or engine message) on one line, without trailing spaces.
std::string one_line(const char *text);

struct PluginRequest {
  const char *file;  // "libkiln_dist.so"
  const char *what;  // "distributed", for messages
  // What the plugin's own libraries are and where they come from, added to
  // a loader failure ("" for nothing to add).
  const char *needs;
  // The entry points it must export besides kiln_plugin_build_id.
  std::initializer_list<const char *> symbols;
};

struct PluginLibrary {
  void *handle = nullptr;  // null when it cannot be used
  std::string error;       // then why, naming the file: for the caller's status
  // The file was opened but is not a plugin of this build (not kiln's, or
  // another build's): a broken installation, worth a warning, unlike a
  // plugin that is missing or whose libraries are.
  bool refused = false;
  std::string searched;  // the path and why there, for a debug message
  void *symbol(const char *name) const;
};

// Opens and checks request.file from plugin_directory(). The library is
// opened RTLD_NODELETE and never closed, even when refused: what a plugin's
// libraries register when they load (the CUDA runtime's threads, MPI's exit
// handler, protobuf's descriptor tables) must outlive every use, and a
// second load would pay their start-up again. Callers load each plugin at
// most once per process. Never throws but std::bad_alloc.
PluginLibrary open_plugin(const PluginRequest &request);
// open_plugin once per process for each request.file: every later call,
// from any thread, gets the first one's outcome, loaded or refused. *first
// (may be null) says whether this call opened it. The outcomes live until
// the process exits.
const PluginLibrary &plugin_once(const PluginRequest &request, bool *first);

}  // namespace kiln
