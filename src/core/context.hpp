// Context: its own CPU backend, the process's CUDA backend when there is one
// (shared by every context, see core/backend_registry.hpp), the random
// generator, and logging. Every Storage keeps its Context alive. Thread-safe:
// all members may be called from several threads.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "core/backend.hpp"
#include "core/backend_registry.hpp"

namespace kiln {

struct ContextOptions {
  uint64_t seed = 0;
  int64_t threads = 0;  // 0 = one per core
  kiln_log_level log_level = KILN_LOG_WARNING;
  kiln_log_fn log_fn = nullptr;
  void *log_user = nullptr;
  bool enable_cuda = true;
};

class Context : public std::enable_shared_from_this<Context> {
 public:
  // Makes the backends through registry: a CPU backend for this context and,
  // unless options disable it, the process's CUDA backend.
  static std::shared_ptr<Context> create(const ContextOptions &options, BackendRegistry &registry);

  Backend &cpu() const { return *cpu_; }
  // The backend for device, after checking the device exists; throws
  // DEVICE_UNAVAILABLE saying why not (no plugin + loader message, no
  // driver, index out of range and how many there are).
  Backend &backend(Device device) const;
  void validate(Device device) const { (void)backend(device); }
  bool cuda_available() const { return cuda_ != nullptr && cuda_->device_count() > 0; }
  const std::string &cuda_unavailable_reason() const { return cuda_reason_; }
  int64_t device_count(kiln_device_kind kind) const;
  Device default_device() const { return cuda_available() ? Device::cuda(0) : Device::cpu(); }
  // "cpu", "cpu:0", "cuda", "cuda:N", "auto"; validated against this context.
  Device parse_device(const std::string &text) const;
  // The same grammar without a context: syntax only, and "auto" (which needs
  // one) is INVALID_ARGUMENT.
  static Device parse_device_syntax(const std::string &text);

  // Random numbers: draws reserve a range of counters of the current seed's
  // stream, so results depend only on the seed and the draws before.
  void set_seed(uint64_t seed);
  uint64_t seed() const { return seed_.load(); }
  // Returns the first counter of a fresh range of `count` counters.
  uint64_t reserve_random(uint64_t count);
  // A fresh 64-bit seed derived from the context's stream (for trainers,
  // dropout, shuffling).
  uint64_t derive_seed();

  kiln_log_level log_level() const { return options_.log_level; }
  void log(kiln_log_level level, const std::string &message) const;
  const ContextOptions &options() const { return options_; }

 private:
  explicit Context(const ContextOptions &options);
  ContextOptions options_;
  std::unique_ptr<Backend> cpu_;
  Backend *cuda_ = nullptr;  // the process's; outlives every context
  std::string cuda_reason_;
  std::atomic<uint64_t> seed_{0};
  std::atomic<uint64_t> counter_{0};
  mutable std::mutex log_mutex_;
};

}  // namespace kiln
