// The CUDA backend: one object serves every visible device. Per device, on
// first use: a non-blocking stream on which everything is queued in order, a
// stream-ordered memory pool (cudaMallocFromPoolAsync; memory is kept in the
// pool for reuse instead of going back to the driver at each sync), and the
// cuBLAS(Lt) handles with their workspace (gemm.hpp).
//
// Threads: every method may be called from any thread; each makes its device
// current for the duration of the call and puts the caller's current device
// back, so kiln can live next to other CUDA code in one process.
//
// Copies: with pinned = false both directions return when the copy is done.
// With pinned = true they are only queued: the host buffer must stay alive and
// untouched (copy_to_device) or is not ready to read (copy_to_host) until
// synchronize(index) or another waiting call on that device returns.
// free_pinned must not be called on a buffer with a copy still in flight.
//
// Page-locked memory belongs to no device, but CUDA allocates it through the
// calling thread's current context. alloc_pinned makes that context one kiln
// already uses: the lowest-indexed device kiln has initialised, else the
// caller's current device (device 0 unless the caller chose another). It
// never creates a context on a device kiln and its caller do not use, and the
// allocation is portable (usable from every device).
//
// Failures: a size above the device's total memory (host memory for
// alloc_pinned) is OUT_OF_MEMORY before CUDA is asked; a device that cannot
// be made current is DEVICE_UNAVAILABLE; after a sticky fault (check.hpp)
// every call on that device fails at once, naming the fault.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "core/backend.hpp"
#include "backend/cuda/cudnn_engine.hpp"
#include "backend/cuda/gemm.hpp"
#include "backend/cuda/kernels.hpp"

namespace kiln::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device_count);
  ~CudaBackend() override;

  kiln_device_kind kind() const override { return KILN_DEVICE_CUDA; }
  int64_t device_count() const override { return int64_t(devices_.size()); }
  DeviceInfo info(int64_t index) const override;
  void synchronize(int64_t index) override;
  void synchronize_device(int64_t index) override;
  void *queue(int64_t index) override;

  void *alloc(int64_t index, int64_t bytes) override;
  void free(int64_t index, void *ptr) override;
  void *alloc_pinned(int64_t bytes) override;
  void free_pinned(void *ptr) override;
  void copy_to_device(int64_t index, void *dst, const void *host_src, int64_t bytes, bool pinned) override;
  void copy_to_host(int64_t index, void *host_dst, const void *src, int64_t bytes, bool pinned) override;
  void copy_on_device(int64_t index, void *dst, const void *src, int64_t bytes) override;

  void fill(int64_t index, const FillArgs &args) override;
  void arange(int64_t index, const ArangeArgs &args) override;
  void cast(int64_t index, const CastArgs &args) override;
  void unary(int64_t index, const UnaryArgs &args) override;
  void scalar(int64_t index, const ScalarArgs &args) override;
  void binary(int64_t index, const BinaryArgs &args) override;
  void reduce(int64_t index, const ReduceArgs &args) override;
  void softmax(int64_t index, const SoftmaxArgs &args) override;
  void gemm(int64_t index, const GemmArgs &args) override;

  void bias_act(int64_t index, const BiasActArgs &args) override;
  void act_backward(int64_t index, const ActBackwardArgs &args) override;
  void bias_grad(int64_t index, const BiasGradArgs &args) override;
  void cross_entropy(int64_t index, const LossArgs &args) override;
  void mse(int64_t index, const LossArgs &args) override;
  void bce_with_logits(int64_t index, const LossArgs &args) override;
  void dropout(int64_t index, const DropoutArgs &args, const StepParams *step) override;
  void dropout_backward(int64_t index, const DropoutBackwardArgs &args) override;
  void clip_grad_norm(int64_t index, const ClipArgs &args) override;
  void sgd_update(int64_t index, const SgdArgs &args, const StepParams *step) override;
  void adam_update(int64_t index, const AdamArgs &args, const StepParams *step) override;
  void gather(int64_t index, const GatherArgs &args, const StepParams *step) override;
  void shuffle(int64_t index, int64_t n, uint64_t seed, int64_t *out) override;

  // The CUDA fast path: cuBLASLt epilogues and CUDA graphs (program.hpp).
  std::unique_ptr<Executable> compile(int64_t index, const StepProgram &program) override;

  // ---- for CudaExecutable (program.cpp) ----------------------------------
  // Makes `index` the calling thread's current device for one call and
  // restores the caller's device; refuses a device broken by a sticky fault.
  class Scope {
   public:
    Scope(const CudaBackend &backend, int64_t index);
    ~Scope();
    Scope(const Scope &) = delete;
    Scope &operator=(const Scope &) = delete;

   private:
    int previous_ = 0, index_ = 0;
  };
  // Where this thread's kernels for device `index` go now, and its products;
  // the device must be current (a Scope).
  Launch launch(int64_t index);
  Gemm &matmuls(int64_t index);
  // The device's cuDNN engine, made (and libcudnn loaded) on first call; null
  // with *reason set where cuDNN cannot be used, which is never an error.
  CudnnEngine *cudnn(int64_t index, std::string *reason);
  // While alive, this thread's kernels for device `index` are queued on
  // `stream` instead of the device's stream. CudaExecutable captures a graph
  // on its own stream through the ordinary kernel methods this way, so work
  // that other threads queue meanwhile is never captured into it.
  class Redirect {
   public:
    Redirect(int64_t index, cudaStream_t stream);
    ~Redirect();
    Redirect(const Redirect &) = delete;
    Redirect &operator=(const Redirect &) = delete;
  };

 private:
  struct Device {
    std::mutex init_mutex;
    std::atomic<bool> ready{false};
    cudaStream_t stream = nullptr;
    cudaMemPool_t pool = nullptr;  // null where the device has no memory pools: plain cudaMalloc
    int64_t total_memory = 0;      // no allocation can be larger
    std::unique_ptr<Gemm> gemm;
    Launch launch;
    std::once_flag cudnn_once;
    std::unique_ptr<CudnnEngine> cudnn;  // null where cuDNN is unavailable, for cudnn_reason
    std::string cudnn_reason;
    void release() noexcept;
  };
  void check_index(int64_t index) const;
  Device &device(int64_t index);  // initialised on first use; the device must be current
  int64_t pinned_device() const;  // see the header comment

  std::vector<std::unique_ptr<Device>> devices_;
  // Softmax on cuDNN only where KILN_ENABLE=cudnn asks (and KILN_DISABLE
  // does not forbid it, core/program.hpp): cuDNN is off by default, and
  // these variables are the one switch for it outside step programs, read
  // once.
  bool cudnn_softmax_ = false;
};

}  // namespace kiln::cuda
