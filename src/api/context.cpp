// C entry points: context options, contexts.
#include <string>

#include "api/handles.hpp"
#include "backend/registry.hpp"

namespace {

// More threads than this is a caller's mistake (a garbage value, a count of
// bytes), not a machine kiln runs on.
constexpr int64_t kMaxThreads = 1024;

}  // namespace

extern "C" {

KILN_API kiln_status kiln_context_options_create(kiln_context_options **out) {
  return kiln::api::guard([&] {
    kiln::api::require(out, "out");
    *out = kiln::api::make_handle<kiln_context_options>(kiln::ContextOptions{});
  }, out);
}

KILN_API void kiln_context_options_release(kiln_context_options *options) { kiln::api::release_handle(options); }

KILN_API kiln_status kiln_context_options_set_seed(kiln_context_options *options, uint64_t seed) {
  return kiln::api::guard([&] { kiln::api::lookup(options, "options")->value.seed = seed; });
}

KILN_API kiln_status kiln_context_options_set_num_threads(kiln_context_options *options, int64_t threads) {
  return kiln::api::guard([&] {
    kiln_context_options *o = kiln::api::lookup(options, "options");
    kiln::check(threads >= 0 && threads <= kMaxThreads, KILN_ERROR_INVALID_ARGUMENT,
                "threads must be 0 (one per core) or 1.." + std::to_string(kMaxThreads) + ", got " +
                    std::to_string(threads));
    o->value.threads = threads;
  });
}

KILN_API kiln_status kiln_context_options_set_log_level(kiln_context_options *options, kiln_log_level level) {
  return kiln::api::guard([&] {
    kiln_context_options *o = kiln::api::lookup(options, "options");
    o->value.log_level = kiln::api::checked_enum(level, KILN_LOG_DEBUG, KILN_LOG_OFF, "log level");
  });
}

KILN_API kiln_status kiln_context_options_set_log_callback(kiln_context_options *options, kiln_log_fn fn,
                                                           void *user) {
  return kiln::api::guard([&] {
    kiln_context_options *o = kiln::api::lookup(options, "options");
    o->value.log_fn = fn;
    o->value.log_user = fn ? user : nullptr;
  });
}

KILN_API kiln_status kiln_context_options_set_enable_cuda(kiln_context_options *options, int enable) {
  return kiln::api::guard([&] { kiln::api::lookup(options, "options")->value.enable_cuda = enable != 0; });
}

KILN_API kiln_status kiln_context_create(const kiln_context_options *options, kiln_context **out) {
  return kiln::api::guard([&] {
    kiln::api::require(out, "out");
    kiln::ContextOptions o = options ? kiln::api::value(options, "options") : kiln::ContextOptions{};
    *out = kiln::api::make_handle<kiln_context>(kiln::Context::create(o, kiln::backend_registry()));
  }, out);
}

KILN_API void kiln_context_release(kiln_context *ctx) { kiln::api::release_handle(ctx); }

KILN_API kiln_status kiln_context_retain(kiln_context *ctx, kiln_context **out) {
  return kiln::api::retain_handle(ctx, "ctx", out);
}

KILN_API kiln_status kiln_context_set_seed(kiln_context *ctx, uint64_t seed) {
  return kiln::api::guard([&] { kiln::api::value(ctx, "ctx")->set_seed(seed); });
}

}  // extern "C"
