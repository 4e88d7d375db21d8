// Context creation (CPU backend, then the CUDA plugin), device lookup and
// parsing, and the random stream. Logging is in log.cpp.
#include "core/context.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/plugin.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"

namespace kiln {

namespace {

constexpr const char *kPluginName = "libkiln_cuda.so";

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

namespace {

std::string visible_devices(int64_t count) {
  if (count == 0) return "no CUDA device is visible";
  if (count == 1) return "1 CUDA device is visible (cuda:0)";
  return std::to_string(count) + " CUDA devices are visible (cuda:0..cuda:" + std::to_string(count - 1) + ")";
}

[[noreturn]] void bad_device_text(const std::string &text, const std::string &why) {
  // Quote enough to recognise the text, not a whole buffer passed by mistake.
  constexpr size_t kQuoted = 64;
  std::string shown = text.size() <= kQuoted ? text : text.substr(0, kQuoted) + "...";
  fail(KILN_ERROR_INVALID_ARGUMENT, "invalid device \"" + shown + "\": " + why);
}

}  // namespace

Context::Context(const ContextOptions &options) : options_(options), seed_(options.seed) {}

Context::~Context() {
  // The CUDA backend's code lives in the plugin: destroy it before unmapping.
  cuda_.reset();
  if (cuda_library_) dlclose(cuda_library_);
  cpu_.reset();
}

std::shared_ptr<Context> Context::create(const ContextOptions &options) {
  std::shared_ptr<Context> ctx(new Context(options));
  ctx->cpu_ = make_cpu_backend(options.threads);
  if (options.enable_cuda) {
    ctx->load_cuda_plugin();
  } else {
    ctx->cuda_reason_ = "the CUDA backend was disabled by the context options (enable_cuda = 0)";
  }
  if (ctx->cuda_available()) {
    ctx->log(KILN_LOG_INFO, "CUDA backend loaded: " + visible_devices(ctx->cuda_->device_count()));
  } else {
    ctx->log(KILN_LOG_INFO, "CUDA backend not available: " + ctx->cuda_reason_);
  }
  return ctx;
}

void Context::load_cuda_plugin() {
  std::string origin;
  const std::string dir = plugin_directory(&origin);
  std::string path = dir.empty() ? kPluginName : dir + "/" + kPluginName;
  log(KILN_LOG_DEBUG, "looking for the CUDA plugin at " + path + " (from " + origin + ")");

  struct stat st {};
  if (!dir.empty() && stat(path.c_str(), &st) != 0) {
    cuda_reason_ = std::string(kPluginName) + " not found in " + dir + " (" + origin +
                   "): " + std::strerror(errno);
    return;
  }
  void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    cuda_reason_ = "cannot load the CUDA plugin " + path + ": " + one_line(dlerror());
    return;
  }

  auto version_fn =
      reinterpret_cast<kiln_backend_interface_version_fn>(dlsym(library, "kiln_backend_interface_version"));
  auto create_fn = reinterpret_cast<kiln_backend_cuda_create_fn>(dlsym(library, "kiln_backend_cuda_create"));
  if (!version_fn || !create_fn) {
    cuda_reason_ = "the CUDA plugin " + path + " is not a kiln backend: it lacks " +
                   (version_fn ? "kiln_backend_cuda_create" : "kiln_backend_interface_version");
    dlclose(library);
    log(KILN_LOG_WARNING, cuda_reason_);
    return;
  }
  int version = version_fn();
  if (version != kBackendInterfaceVersion) {
    cuda_reason_ = "the CUDA plugin " + path + " was built for interface " + std::to_string(version) +
                   ", this library expects " + std::to_string(kBackendInterfaceVersion) +
                   " (install libkiln and libkiln_cuda from the same build)";
    dlclose(library);
    log(KILN_LOG_WARNING, cuda_reason_);
    return;
  }

  char reason[512] = {};
  Backend *backend = nullptr;
  try {
    backend = create_fn(reason, sizeof reason);
  } catch (const std::exception &e) {  // the plugin promises not to throw; do not trust it with our caller
    std::snprintf(reason, sizeof reason, "%s", e.what());
  } catch (...) {
    std::snprintf(reason, sizeof reason, "unknown exception while creating the CUDA backend");
  }
  reason[sizeof reason - 1] = '\0';
  if (!backend) {
    cuda_reason_ = one_line(reason);
    if (cuda_reason_.empty()) cuda_reason_ = "the CUDA plugin " + path + " gave no backend and no reason";
    dlclose(library);
    return;
  }
  cuda_.reset(backend);
  cuda_library_ = library;
  if (cuda_->device_count() == 0) cuda_reason_ = "the CUDA backend loaded but " + visible_devices(0);
}

Backend &Context::backend(Device device) const {
  if (device.kind == KILN_DEVICE_CPU) return *cpu_;
  check(device.kind == KILN_DEVICE_CUDA, KILN_ERROR_INVALID_ARGUMENT,
        "unknown device kind " + std::to_string(int(device.kind)));
  if (!cuda_) fail(KILN_ERROR_DEVICE_UNAVAILABLE, device.str() + " requested but CUDA is unavailable: " + cuda_reason_);
  int64_t count = cuda_->device_count();
  if (device.index < 0 || device.index >= count)
    fail(KILN_ERROR_DEVICE_UNAVAILABLE, device.str() + " requested but " + visible_devices(count));
  return *cuda_;
}

int64_t Context::device_count(kiln_device_kind kind) const {
  if (kind == KILN_DEVICE_CPU) return 1;
  check(kind == KILN_DEVICE_CUDA, KILN_ERROR_INVALID_ARGUMENT, "unknown device kind " + std::to_string(int(kind)));
  return cuda_ ? cuda_->device_count() : 0;
}

Device Context::parse_device_syntax(const std::string &text) {
  if (text == "cpu" || text == "cpu:0") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text == "auto") bad_device_text(text, "\"auto\" depends on the devices present and needs a context");
  const std::string prefix = "cuda:";
  if (text.compare(0, prefix.size(), prefix) != 0) {
    if (text.compare(0, 4, "cpu:") == 0) bad_device_text(text, "the CPU is one device, \"cpu\" (or \"cpu:0\")");
    bad_device_text(text, "expected \"cpu\", \"cuda\", \"cuda:N\" or \"auto\"");
  }
  std::string digits = text.substr(prefix.size());
  if (digits.empty()) bad_device_text(text, "the index after \"cuda:\" is missing");
  // CUDA numbers devices with an int, so a larger index can never exist.
  int64_t index = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') bad_device_text(text, "the index must be a non-negative decimal number");
    index = index * 10 + (c - '0');
    if (index > INT_MAX) bad_device_text(text, "the index is larger than " + std::to_string(INT_MAX));
  }
  return Device::cuda(index);
}

Device Context::parse_device(const std::string &text) const {
  Device device = text == "auto" ? default_device() : parse_device_syntax(text);
  validate(device);
  return device;
}

void Context::set_seed(uint64_t seed) {
  seed_.store(seed);
  counter_.store(0);
}

uint64_t Context::reserve_random(uint64_t count) { return counter_.fetch_add(count); }

uint64_t Context::derive_seed() { return rng_bits(seed_.load(), reserve_random(1)); }

}  // namespace kiln
