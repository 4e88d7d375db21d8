#include "plugin/loader.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "kiln/build_id.hpp"

namespace kiln {

namespace {

// Any function of libkiln: dladdr on it names the file libkiln was loaded from.
void locate_libkiln() {}

// A plugin's build ID for a message: at most 64 printable characters (a
// foreign library may return anything).
std::string quoted_id(const char *id) {
  if (!id) return "(null)";
  std::string s;
  for (const char *c = id; *c && s.size() < 64; ++c) s += (*c >= 0x20 && *c < 0x7f) ? *c : '?';
  return s;
}

}  // namespace

std::string plugin_directory(std::string *origin) {
  const char *env = std::getenv("KILN_BACKEND_PATH");
  if (env && *env) {
    *origin = "KILN_BACKEND_PATH";
    return env;
  }
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&locate_libkiln), &info) && info.dli_fname) {
    std::string file = info.dli_fname;
    size_t slash = file.rfind('/');
    if (slash != std::string::npos) {
      *origin = "the directory of libkiln";
      return file.substr(0, slash == 0 ? 1 : slash);
    }
  }
  *origin = "the dynamic loader's search path";
  return "";
}

std::string one_line(const char *text) {
  std::string s = text ? text : "";
  for (char &c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

void *PluginLibrary::symbol(const char *name) const { return dlsym(handle, name); }

const PluginLibrary &plugin_once(const PluginRequest &request, bool *first) {
  static std::mutex mutex;
  // Never destroyed: a context alive while static objects are destroyed at
  // exit (a binding's finalizer) may still ask.
  static auto *opened = new std::map<std::string, PluginLibrary>;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = opened->find(request.file);
  if (first) *first = found == opened->end();
  if (found == opened->end()) found = opened->emplace(request.file, open_plugin(request)).first;
  return found->second;
}

PluginLibrary open_plugin(const PluginRequest &request) {
  PluginLibrary p;
  std::string origin;
  const std::string dir = plugin_directory(&origin);
  const std::string path = dir.empty() ? request.file : dir + "/" + request.file;
  p.searched = path + " (from " + origin + ")";
  const std::string needs = *request.needs ? std::string("; ") + request.needs : std::string();
  const std::string name = std::string("the ") + request.what + " plugin " + path;

  struct stat st {};
  if (!dir.empty() && stat(path.c_str(), &st) != 0) {
    p.error = std::string("cannot load the ") + request.what + " plugin: " + request.file + " not found in " + dir +
              " (" + origin + "): " + std::strerror(errno) + needs;
    return p;
  }
  void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!library) {
    const std::string why = one_line(dlerror());
    p.error = std::string("cannot load ") + name + " (from " + origin + "): " + why;
    // A plugin linked against another build's private symbols needs a
    // version node this libkiln does not have (src/api/kiln.map.in).
    if (why.find("KILN_PRIVATE_") != std::string::npos) {
      p.error += "; it is from another build of kiln, this libkiln's build ID is " KILN_BUILD_ID
                 ": install libkiln and its plugins from the same build";
      p.refused = true;
    } else {
      p.error += needs;
    }
    return p;
  }
  // The identity first: another build's plugin may lack or rename entry
  // points, and that is not what is wrong with it.
  auto build_id_fn = reinterpret_cast<const char *(*)(void)>(dlsym(library, "kiln_plugin_build_id"));
  if (!build_id_fn) {
    p.error = name + " is not a plugin of this kiln: it lacks kiln_plugin_build_id (an older kiln's, or not " +
              "kiln's); install libkiln and its plugins from the same build";
    p.refused = true;
    return p;
  }
  const std::string id = quoted_id(build_id_fn());
  if (id != KILN_BUILD_ID) {
    p.error = name + " is from another build of kiln: its build ID is " + id +
              ", this libkiln's is " KILN_BUILD_ID "; install libkiln and its plugins from the same build";
    p.refused = true;
    return p;
  }
  for (const char *symbol : request.symbols)
    if (!dlsym(library, symbol)) {
      p.error = name + " is not kiln's: it lacks " + symbol;
      p.refused = true;
      return p;
    }
  p.handle = library;
  return p;
}

}  // namespace kiln
