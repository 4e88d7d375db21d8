// Context creation (the backends from the registry), device lookup and
// parsing, and the random stream. Logging is in log.cpp.
#include "core/context.hpp"

#include <climits>

#include "core/error.hpp"
#include "core/excerpt.hpp"
#include "core/rng.hpp"

namespace kiln {

namespace {

std::string visible_devices(int64_t count) {
  if (count == 0) return "no CUDA device is visible";
  if (count == 1) return "1 CUDA device is visible (cuda:0)";
  return std::to_string(count) + " CUDA devices are visible (cuda:0..cuda:" + std::to_string(count - 1) + ")";
}

[[noreturn]] void bad_device_text(const std::string &text, const std::string &why) {
  // Quote enough to recognise the text, not a whole buffer passed by mistake.
  fail(KILN_ERROR_INVALID_ARGUMENT, "invalid device \"" + excerpt(text, 64) + "\": " + why);
}

}  // namespace

Context::Context(const ContextOptions &options) : options_(options), seed_(options.seed) {}

std::shared_ptr<Context> Context::create(const ContextOptions &options, BackendRegistry &registry) {
  std::shared_ptr<Context> ctx(new Context(options));
  ctx->cpu_ = registry.make_cpu(options.threads);
  if (!options.enable_cuda) {
    ctx->cuda_reason_ = "the CUDA backend was disabled by the context options (enable_cuda = 0)";
    ctx->log(KILN_LOG_INFO, "CUDA backend not available: " + ctx->cuda_reason_);
    return ctx;
  }
  const CudaBackendLoad &cuda = registry.cuda();
  ctx->cuda_ = cuda.backend;
  ctx->cuda_reason_ = cuda.reason;
  ctx->log(KILN_LOG_DEBUG, "the CUDA plugin of this process was looked for at " + cuda.searched);
  if (ctx->cuda_available()) {
    ctx->log(KILN_LOG_INFO, "CUDA backend loaded: " + visible_devices(ctx->cuda_->device_count()));
  } else {
    // A broken installation is worth a warning even at the default level.
    ctx->log(cuda.broken_installation ? KILN_LOG_WARNING : KILN_LOG_INFO,
             "CUDA backend not available: " + ctx->cuda_reason_);
  }
  return ctx;
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
  // As PyTorch's parser: one spelling per device, so "cuda:01" is no alias of "cuda:1".
  if (digits.size() > 1 && digits[0] == '0') bad_device_text(text, "the index has a leading zero");
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
