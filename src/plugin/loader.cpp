#include "plugin/loader.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace kiln {

namespace {

// Any function of libkiln: dladdr on it names the file libkiln was loaded from.
void locate_libkiln() {}

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
    p.error = std::string("cannot load ") + name + " (from " + origin + "): " + one_line(dlerror()) + needs;
    return p;
  }
  for (const char *symbol : request.symbols)
    if (!dlsym(library, symbol)) {
      p.error = name + " is not kiln's: it lacks " + symbol;
      p.refused = true;
      return p;
    }
  auto version_fn = reinterpret_cast<int (*)(void)>(dlsym(library, request.version_symbol));
  if (!version_fn) {
    p.error = name + " is not kiln's: it lacks " + request.version_symbol;
    p.refused = true;
    return p;
  }
  if (version_fn() != request.version) {
    std::string stem = request.file;
    stem = stem.substr(0, stem.rfind(".so"));
    p.error = name + " was built for interface " + std::to_string(version_fn()) + ", this library expects " +
              std::to_string(request.version) + " (install libkiln and " + stem + " from the same build)";
    p.refused = true;
    return p;
  }
  p.handle = library;
  return p;
}

}  // namespace kiln
