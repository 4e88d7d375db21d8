// Version queries, status names, the thread-local last error, and the handle
// registry shared by every entry point.
#include <cstring>
#include <string>

#include "api/handles.hpp"

namespace {
thread_local std::string last_error;
}

namespace kiln::api {

Registry &registry() {
  // Never destroyed: handles may be released by finalizers after static
  // destructors have run.
  static Registry *r = new Registry;
  return *r;
}

kiln_status set_error(kiln_status status, const char *message) noexcept {
  try {
    last_error = message ? message : "";
  } catch (...) {
    // Keep the status even when the message cannot be stored.
  }
  return status;
}

void invalid_handle(const char *what, const char *type) {
  fail(KILN_ERROR_INVALID_HANDLE,
       std::string(what) + " is not a live " + type + " handle (released, or another kind of handle)");
}

Device device(kiln_device d) {
  if (d.kind == KILN_DEVICE_CPU) {
    check(d.index == -1 || d.index == 0, KILN_ERROR_INVALID_ARGUMENT,
          "cpu device index must be -1 (or 0), got " + std::to_string(d.index));
    return Device::cpu();
  }
  if (d.kind == KILN_DEVICE_CUDA) {
    check(d.index >= 0, KILN_ERROR_INVALID_ARGUMENT, "cuda device index must be >= 0, got " + std::to_string(d.index));
    return Device::cuda(d.index);
  }
  fail(KILN_ERROR_INVALID_ARGUMENT, "unknown device kind " + std::to_string(int(d.kind)));
}

DType dtype(kiln_dtype d) {
  check(dtype_valid(int(d)), KILN_ERROR_INVALID_ARGUMENT, "unknown dtype " + std::to_string(int(d)));
  return DType(d);
}

}  // namespace kiln::api

extern "C" {

KILN_API const char *kiln_version_string(void) {
#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)
  return KILN_STR(KILN_VERSION_MAJOR) "." KILN_STR(KILN_VERSION_MINOR) "." KILN_STR(KILN_VERSION_PATCH);
}

KILN_API void kiln_version(int *major, int *minor, int *patch) {
  if (major) *major = KILN_VERSION_MAJOR;
  if (minor) *minor = KILN_VERSION_MINOR;
  if (patch) *patch = KILN_VERSION_PATCH;
}

KILN_API int kiln_abi_version(void) { return KILN_ABI_VERSION; }

KILN_API const char *kiln_status_name(kiln_status status) {
  switch (status) {
    case KILN_OK: return "KILN_OK";
    case KILN_ERROR_INVALID_ARGUMENT: return "KILN_ERROR_INVALID_ARGUMENT";
    case KILN_ERROR_INVALID_HANDLE: return "KILN_ERROR_INVALID_HANDLE";
    case KILN_ERROR_SHAPE_MISMATCH: return "KILN_ERROR_SHAPE_MISMATCH";
    case KILN_ERROR_DTYPE_MISMATCH: return "KILN_ERROR_DTYPE_MISMATCH";
    case KILN_ERROR_DEVICE_UNAVAILABLE: return "KILN_ERROR_DEVICE_UNAVAILABLE";
    case KILN_ERROR_OUT_OF_MEMORY: return "KILN_ERROR_OUT_OF_MEMORY";
    case KILN_ERROR_IO: return "KILN_ERROR_IO";
    case KILN_ERROR_FORMAT: return "KILN_ERROR_FORMAT";
    case KILN_ERROR_NOT_SUPPORTED: return "KILN_ERROR_NOT_SUPPORTED";
    case KILN_ERROR_CANCELLED: return "KILN_ERROR_CANCELLED";
    case KILN_ERROR_BACKEND: return "KILN_ERROR_BACKEND";
    case KILN_ERROR_INTERNAL: return "KILN_ERROR_INTERNAL";
    case KILN_ERROR_COMMUNICATION: return "KILN_ERROR_COMMUNICATION";
  }
  return "KILN_ERROR_UNKNOWN";
}

KILN_API const char *kiln_last_error(void) { return last_error.c_str(); }

}  // extern "C"
