// C entry points: device parsing and formatting, CUDA availability, device
// counts and info, synchronisation.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "api/handles.hpp"

namespace {

// kiln_device_info may come from an older header: the caller's struct_size
// says which fields exist, and only those are written.
constexpr uint32_t kMinInfoSize = offsetof(kiln_device_info, device) + sizeof(kiln_device);

template <class F> bool fits(uint32_t size, size_t offset) { return offset + sizeof(F) <= size; }
#define KILN_INFO_FITS(size, field) fits<decltype(kiln_device_info::field)>(size, offsetof(kiln_device_info, field))

// Writes info's fields that fit into out's struct_size (which stays as the
// caller set it). With info = {} this clears them.
void fill_info(kiln_device_info *out, uint32_t size, kiln_device device, const kiln::DeviceInfo &info) {
  if (KILN_INFO_FITS(size, device)) out->device = device;
  if (KILN_INFO_FITS(size, name)) {
    size_t n = std::min(info.name.size(), sizeof out->name - 1);
    std::memcpy(out->name, info.name.data(), n);
    std::memset(out->name + n, 0, sizeof out->name - n);
  }
  if (KILN_INFO_FITS(size, total_memory)) out->total_memory = info.total_memory;
  if (KILN_INFO_FITS(size, free_memory)) out->free_memory = info.free_memory;
  if (KILN_INFO_FITS(size, compute_major)) out->compute_major = info.compute_major;
  if (KILN_INFO_FITS(size, compute_minor)) out->compute_minor = info.compute_minor;
  if (KILN_INFO_FITS(size, multiprocessor_count)) out->multiprocessor_count = info.multiprocessor_count;
  if (KILN_INFO_FITS(size, driver_version)) out->driver_version = info.driver_version;
  if (KILN_INFO_FITS(size, runtime_version)) out->runtime_version = info.runtime_version;
  if (KILN_INFO_FITS(size, threads)) out->threads = info.threads;
}
#undef KILN_INFO_FITS

}  // namespace

extern "C" {

KILN_API kiln_status kiln_device_parse(kiln_context *ctx, const char *text, kiln_device *out) {
  return kiln::api::guard([&] {
    kiln::api::require(text, "text");
    kiln::api::require(out, "out");
    kiln::Device d = ctx ? kiln::api::value(ctx, "ctx")->parse_device(text) : kiln::Context::parse_device_syntax(text);
    *out = d.to_c();
  }, out);
}

KILN_API kiln_status kiln_device_format(kiln_device device, char *buf, int64_t buf_size) {
  if (buf && buf_size > 0) buf[0] = '\0';
  return kiln::api::guard([&] {
    kiln::api::require(buf, "buf");
    kiln::check(buf_size > 0, KILN_ERROR_INVALID_ARGUMENT, "buf_size must be > 0, got " + std::to_string(buf_size));
    std::string text = kiln::api::device(device).str();
    kiln::check(int64_t(text.size()) < buf_size, KILN_ERROR_INVALID_ARGUMENT,
                "a buffer of " + std::to_string(buf_size) + " bytes cannot hold \"" + text + "\" (needs " +
                    std::to_string(text.size() + 1) + ")");
    std::memcpy(buf, text.c_str(), text.size() + 1);
  });
}

KILN_API kiln_status kiln_cuda_is_available(kiln_context *ctx, int *out) {
  return kiln::api::guard([&] {
    auto c = kiln::api::value(ctx, "ctx");
    kiln::api::require(out, "out");
    *out = c->cuda_available() ? 1 : 0;
  }, out);
}

KILN_API kiln_status kiln_cuda_unavailable_reason(kiln_context *ctx, const char **out) {
  return kiln::api::guard([&] {
    auto c = kiln::api::value(ctx, "ctx");
    kiln::api::require(out, "out");
    // Owned by the context, which lives at least as long as the handle.
    *out = c->cuda_available() ? "" : c->cuda_unavailable_reason().c_str();
  }, out);
}

KILN_API kiln_status kiln_device_count(kiln_context *ctx, kiln_device_kind kind, int64_t *out) {
  return kiln::api::guard([&] {
    auto c = kiln::api::value(ctx, "ctx");
    kiln::api::require(out, "out");
    *out = c->device_count(kiln::api::checked_enum(kind, KILN_DEVICE_CPU, KILN_DEVICE_CUDA, "device kind"));
  }, out);
}

KILN_API kiln_status kiln_default_device(kiln_context *ctx, kiln_device *out) {
  return kiln::api::guard([&] {
    auto c = kiln::api::value(ctx, "ctx");
    kiln::api::require(out, "out");
    *out = c->default_device().to_c();
  }, out);
}

KILN_API kiln_status kiln_device_get_info(kiln_context *ctx, kiln_device device, kiln_device_info *out) {
  // Not guard's out-clearing: that would write sizeof(kiln_device_info)
  // bytes into a caller's possibly smaller struct.
  uint32_t size = out ? out->struct_size : 0;
  bool size_ok = out && size >= kMinInfoSize;
  kiln_status status = kiln::api::guard([&] {
    auto c = kiln::api::value(ctx, "ctx");
    kiln::api::require(out, "out");
    kiln::check(size_ok, KILN_ERROR_INVALID_ARGUMENT,
                "out->struct_size is " + std::to_string(size) + ", smaller than the " + std::to_string(kMinInfoSize) +
                    " bytes of its first two fields (set it to sizeof(kiln_device_info))");
    kiln::Device d = kiln::api::device(device);
    kiln::DeviceInfo info = c->backend(d).info(d.index);
    fill_info(out, size, d.to_c(), info);
  });
  if (status != KILN_OK && size_ok) fill_info(out, size, kiln_device{}, kiln::DeviceInfo{});
  return status;
}

KILN_API kiln_status kiln_device_synchronize(kiln_context *ctx, kiln_device device) {
  return kiln::api::guard([&] {
    auto c = kiln::api::value(ctx, "ctx");
    kiln::Device d = kiln::api::device(device);
    c->backend(d).synchronize(d.index);
  });
}

}  // extern "C"
