// Version queries, status names, the thread-local last error, and the handle
// registry shared by every entry point.
#include <climits>
#include <cstring>
#include <string>

#include "api/handles.hpp"
#include "core/excerpt.hpp"
#include "core/version.hpp"

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

CallPins &call_pins() {
  thread_local CallPins pins;
  return pins;
}

kiln_status set_error(kiln_status status, const char *message) noexcept {
  try {
    // Every message quotes its input in excerpts already; this bounds what
    // any path, name or nesting of messages may still add up to.
    last_error = bounded_message(message ? message : "");
  } catch (...) {
    // Keep the status even when the message cannot be stored.
  }
  return status;
}

void invalid_handle(const char *what, const char *type) {
  fail(KILN_ERROR_INVALID_HANDLE,
       std::string(what) + " is not a live " + type + " handle (released, or another kind of handle)");
}

Device device(const kiln_device &d) {
  const kiln_device_kind kind = checked_enum(d.kind, KILN_DEVICE_CPU, KILN_DEVICE_CUDA, "device kind");
  if (kind == KILN_DEVICE_CPU) {
    check(d.index == -1 || d.index == 0, KILN_ERROR_INVALID_ARGUMENT,
          "cpu device index must be -1 (or 0), got " + std::to_string(d.index));
    return Device::cpu();
  }
  {
    check(d.index >= 0, KILN_ERROR_INVALID_ARGUMENT, "cuda device index must be >= 0, got " + std::to_string(d.index));
    // CUDA numbers devices with an int, as kiln_device_parse accepts them.
    check(d.index <= INT_MAX, KILN_ERROR_INVALID_ARGUMENT,
          "cuda device index " + std::to_string(d.index) + " is larger than " + std::to_string(INT_MAX));
    return Device::cuda(d.index);
  }
}

DType dtype(const kiln_dtype &d) {
  int raw;
  std::memcpy(&raw, &d, sizeof raw);  // see checked_enum
  check(dtype_valid(raw), KILN_ERROR_INVALID_ARGUMENT, "unknown dtype " + std::to_string(raw));
  return DType(raw);
}

}  // namespace kiln::api

extern "C" {

KILN_API const char *kiln_version_string(void) { return kiln::kVersionText; }

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
    case KILN_ERROR_BUSY: return "KILN_ERROR_BUSY";
    case KILN_ERROR_NUMERIC: return "KILN_ERROR_NUMERIC";
    case KILN_ERROR_COMMUNICATION: return "KILN_ERROR_COMMUNICATION";
  }
  return "KILN_ERROR_UNKNOWN";
}

KILN_API const char *kiln_last_error(void) { return last_error.c_str(); }

}  // extern "C"
