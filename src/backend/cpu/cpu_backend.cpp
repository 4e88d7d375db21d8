// CpuBackend: host memory, copies and device facts here; every kernel is a
// call into kernels.hpp with the backend's thread pool. There is one CPU
// device (index -1, already validated by the context), and every kernel has
// finished when it returns, so synchronize has nothing to wait for.
#include "backend/cpu/cpu_backend.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "backend/cpu/flush_denormals.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/packed_linear.hpp"
#include "backend/cpu/program.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/thread_pool.hpp"

namespace kiln {

namespace {

// Cache-line alignment: no false sharing between tensors, and aligned vector
// loads at the start of every buffer.
constexpr int64_t kAlignment = 64;
// Buffers of at least one huge page (x86-64's 2 MiB) start on one and ask
// the kernel for huge pages (transparent huge pages, where the system's
// setting is "madvise" or "always"): a training step's weights, gradients
// and the dataset then take a few TLB entries instead of hundreds of 4 KiB
// ones. The product kernels walk the weights 4 KiB row after row, and the
// batch gather reads rows anywhere in the dataset; a one-thread
// 784-1024-1024-10 epoch ran 4% faster. Only the whole huge pages inside
// the buffer are advised: its tail keeps 4 KiB pages, so no memory past
// the buffer is ever faulted in for it.
constexpr size_t kHugePage = size_t(2) << 20;

void *aligned_alloc_or_throw(int64_t bytes) {
  if (bytes < 0 || bytes > INT64_MAX - kAlignment) {
    fail(KILN_ERROR_OUT_OF_MEMORY, "cannot allocate " + std::to_string(bytes) + " bytes of host memory");
  }
  // Zero bytes still get a distinct valid pointer, so callers never see null.
  size_t rounded = size_t((bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (rounded == 0) rounded = kAlignment;
  const bool huge = rounded >= kHugePage;
  void *ptr = nullptr;
  if (posix_memalign(&ptr, huge ? kHugePage : size_t(kAlignment), rounded) != 0 || ptr == nullptr) {
    fail(KILN_ERROR_OUT_OF_MEMORY, "out of host memory allocating " + std::to_string(bytes) + " bytes");
  }
  // Advice only: where the kernel has no huge pages it fails, and 4 KiB
  // pages serve as before.
  if (huge) madvise(ptr, rounded, MADV_HUGEPAGE);
  return ptr;
}

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.compare(0, 10, "model name") != 0) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    size_t start = line.find_first_not_of(" \t", colon + 1);
    if (start != std::string::npos) return line.substr(start);
  }
  return "CPU";
}

// MemTotal and MemAvailable from /proc/meminfo (in kB there); sysconf's page
// counts where it is unreadable.
void host_memory(int64_t *total, int64_t *available) {
  *total = *available = -1;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemTotal:") *total = kib * 1024;
    if (key == "MemAvailable:") *available = kib * 1024;
  }
  long page = sysconf(_SC_PAGESIZE);
  if (*total < 0) *total = int64_t(sysconf(_SC_PHYS_PAGES)) * page;
  if (*available < 0) *available = int64_t(sysconf(_SC_AVPHYS_PAGES)) * page;
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int64_t threads) : pool_(threads) { cpu::init_blas(); }

  kiln_device_kind kind() const override { return KILN_DEVICE_CPU; }
  int64_t device_count() const override { return 1; }

  DeviceInfo info(int64_t) const override {
    DeviceInfo info;
    info.name = cpu_model_name();
    host_memory(&info.total_memory, &info.free_memory);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    info.multiprocessor_count = cores > 0 ? cores : 1;
    info.threads = pool_.size();
    return info;
  }

  void synchronize(int64_t) override {}

  // ---- memory ----
  void *alloc(int64_t, int64_t bytes) override { return aligned_alloc_or_throw(bytes); }
  void free(int64_t, void *ptr) override { std::free(ptr); }
  void *alloc_pinned(int64_t bytes) override { return aligned_alloc_or_throw(bytes); }
  void free_pinned(void *ptr) override { std::free(ptr); }
  void copy_to_device(int64_t, void *dst, const void *src, int64_t bytes, bool) override { copy(dst, src, bytes); }
  void copy_to_host(int64_t, void *dst, const void *src, int64_t bytes, bool) override { copy(dst, src, bytes); }
  void copy_on_device(int64_t, void *dst, const void *src, int64_t bytes) override { copy(dst, src, bytes); }

  // ---- tensor kernels ----
  void fill(int64_t, const FillArgs &args) override { cpu::fill(pool_, args); }
  void arange(int64_t, const ArangeArgs &args) override { cpu::arange(pool_, args); }
  void cast(int64_t, const CastArgs &args) override { cpu::cast(pool_, args); }
  void unary(int64_t, const UnaryArgs &args) override { cpu::unary(pool_, args); }
  void scalar(int64_t, const ScalarArgs &args) override { cpu::scalar(pool_, args); }
  void binary(int64_t, const BinaryArgs &args) override { cpu::binary(pool_, args); }
  void reduce(int64_t, const ReduceArgs &args) override { cpu::reduce(pool_, args); }
  void softmax(int64_t, const SoftmaxArgs &args) override { cpu::softmax(pool_, args); }
  void gemm(int64_t, const GemmArgs &args) override {
    cpu::FlushDenormals guard;
    cpu::gemm(pool_, args);
  }

  // ---- neural-network kernels ----
  void bias_act(int64_t, const BiasActArgs &args) override {
    cpu::FlushDenormals guard;
    cpu::bias_act(pool_, args);
  }
  void act_backward(int64_t, const ActBackwardArgs &args) override {
    cpu::FlushDenormals guard;
    cpu::act_backward(pool_, args);
  }
  void bias_grad(int64_t, const BiasGradArgs &args) override {
    cpu::FlushDenormals guard;
    cpu::bias_grad(pool_, args);
  }
  void cross_entropy(int64_t, const LossArgs &args) override {
    cpu::FlushDenormals guard;
    cpu::cross_entropy(pool_, args);
  }
  void mse(int64_t, const LossArgs &args) override {
    cpu::FlushDenormals guard;
    cpu::mse(pool_, args);
  }
  void bce_with_logits(int64_t, const LossArgs &args) override {
    cpu::FlushDenormals guard;
    cpu::bce_with_logits(pool_, args);
  }
  void dropout(int64_t, const DropoutArgs &args, const StepParams *step) override {
    cpu::FlushDenormals guard;
    cpu::dropout(pool_, args, step ? rng_bits(step->dropout_seed, args.stream) : args.stream);
  }
  void dropout_backward(int64_t, const DropoutBackwardArgs &args) override {
    cpu::FlushDenormals guard;
    cpu::dropout_backward(pool_, args);
  }
  void clip_grad_norm(int64_t, const ClipArgs &args) override {
    cpu::FlushDenormals guard;
    cpu::clip_grad_norm(pool_, args);
  }
  void sgd_update(int64_t, const SgdArgs &args, const StepParams *step) override {
    cpu::FlushDenormals guard;
    cpu::sgd_update(pool_, args, *step);
  }
  void adam_update(int64_t, const AdamArgs &args, const StepParams *step) override {
    cpu::FlushDenormals guard;
    cpu::adam_update(pool_, args, *step);
  }
  void gather(int64_t, const GatherArgs &args, const StepParams *step) override {
    cpu::FlushDenormals guard;
    cpu::gather(pool_, args, args.order + (step ? step->offset : 0));
  }
  void shuffle(int64_t, int64_t n, uint64_t seed, int64_t *out) override { cpu::shuffle(n, seed, out); }

  // ---- step programs ----
  std::unique_ptr<Executable> compile(int64_t index, const StepProgram &program) override {
    return cpu::compile_cpu(*this, pool_, index, program);
  }

  // ---- inference ----
  std::unique_ptr<PackedLinear> pack_linear(int64_t index, DType t, const void *w, int64_t out,
                                            int64_t in) override {
    std::unique_ptr<PackedLinear> packed = cpu::pack_linear(pool_, t, w, out, in);
    return packed ? std::move(packed) : Backend::pack_linear(index, t, w, out, in);
  }
  void linear_packed(int64_t index, const PackedLinearArgs &args) override {
    cpu::FlushDenormals guard;
    if (!cpu::linear_packed(pool_, args)) Backend::linear_packed(index, args);
  }

 private:
  static void copy(void *dst, const void *src, int64_t bytes) {
    if (bytes > 0 && dst != src) std::memmove(dst, src, size_t(bytes));
  }

  ThreadPool pool_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int64_t threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace kiln
