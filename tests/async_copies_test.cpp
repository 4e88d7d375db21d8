// Races a GPU shows, played on the CPU with a backend whose copies to and
// from page-locked ("pinned") host memory are really asynchronous: they are
// queued and run only when the device is synchronised (or when later work
// on its queue needs them: kernels and copies to unpinned memory run after
// everything queued before, as on a CUDA stream). Its "device memory" is
// host memory, its kernels the CPU backend's.
//  - A pinned tensor overwritten (copy_from_host), read (copy_to_host, item,
//    a CPU op, a DLPack export) or copied while a copy from or into it is
//    still queued: kiln waits for the copy first (Tensor::wait_host_access),
//    so the device gets the old bytes and the host reads the new ones.
//  - A DLPack import's deleter (its producer frees the memory) runs only
//    after kiln's queued work on that memory is done; a DLPack export of
//    device memory is freed only after a wait for the whole device (a
//    consumer's kernels on streams kiln cannot see).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend_harness.hpp"
#include "core/context.hpp"
#include "core/dlpack.hpp"
#include "core/error.hpp"
#include "core/ops.hpp"
#include "core/tensor.hpp"

using namespace kiln;
using kiln::test::g_case;

namespace {

void check(bool ok, const std::string &what) { kiln::test::expect(ok, what); }

// One device, index 0: a queue of pending copies.
class QueuedBackend final : public Backend {
 public:
  std::vector<std::function<void()>> queued;
  std::vector<std::string> calls;  // synchronize, synchronize_device, free: in order

  size_t pending() const { return queued.size(); }
  void flush() {
    for (auto &op : queued) op();
    queued.clear();
  }

  kiln_device_kind kind() const override { return KILN_DEVICE_CUDA; }
  int64_t device_count() const override { return 1; }
  DeviceInfo info(int64_t) const override { return DeviceInfo{}; }
  void synchronize(int64_t) override {
    calls.push_back("synchronize");
    flush();
  }
  void synchronize_device(int64_t) override {
    calls.push_back("synchronize_device");
    flush();
  }
  void *alloc(int64_t, int64_t bytes) override { return std::malloc(size_t(bytes)); }
  void free(int64_t, void *p) override {
    calls.push_back("free");
    std::free(p);
  }
  void *alloc_pinned(int64_t bytes) override { return std::malloc(size_t(bytes)); }
  void free_pinned(void *p) override { std::free(p); }
  void copy_to_device(int64_t, void *dst, const void *src, int64_t n, bool pinned) override {
    copy(dst, src, n, pinned);
  }
  void copy_to_host(int64_t, void *dst, const void *src, int64_t n, bool pinned) override { copy(dst, src, n, pinned); }
  void copy_on_device(int64_t, void *dst, const void *src, int64_t n) override { copy(dst, src, n, true); }

  // Kernels run in queue order: after the copies queued before them.
#define KILN_QUEUED(name, Args) \
  void name(int64_t, const Args &a) override { flush(), cpu_->name(0, a); }
  KILN_QUEUED(fill, FillArgs)
  KILN_QUEUED(arange, ArangeArgs)
  KILN_QUEUED(cast, CastArgs)
  KILN_QUEUED(unary, UnaryArgs)
  KILN_QUEUED(scalar, ScalarArgs)
  KILN_QUEUED(binary, BinaryArgs)
  KILN_QUEUED(reduce, ReduceArgs)
  KILN_QUEUED(softmax, SoftmaxArgs)
  KILN_QUEUED(gemm, GemmArgs)
  KILN_QUEUED(bias_act, BiasActArgs)
  KILN_QUEUED(act_backward, ActBackwardArgs)
  KILN_QUEUED(bias_grad, BiasGradArgs)
  KILN_QUEUED(cross_entropy, LossArgs)
  KILN_QUEUED(mse, LossArgs)
  KILN_QUEUED(bce_with_logits, LossArgs)
  KILN_QUEUED(dropout_backward, DropoutBackwardArgs)
  KILN_QUEUED(clip_grad_norm, ClipArgs)
#undef KILN_QUEUED
  void dropout(int64_t, const DropoutArgs &a, const StepParams *s) override { flush(), cpu_->dropout(0, a, s); }
  void sgd_update(int64_t, const SgdArgs &a, const StepParams *s) override { flush(), cpu_->sgd_update(0, a, s); }
  void adam_update(int64_t, const AdamArgs &a, const StepParams *s) override { flush(), cpu_->adam_update(0, a, s); }
  void gather(int64_t, const GatherArgs &a, const StepParams *s) override { flush(), cpu_->gather(0, a, s); }
  void shuffle(int64_t, int64_t n, uint64_t seed, int64_t *out) override { flush(), cpu_->shuffle(0, n, seed, out); }

 private:
  // Pinned host memory: queued; else after everything queued, at once.
  void copy(void *dst, const void *src, int64_t n, bool async) {
    if (async) {
      queued.push_back([=] { std::memcpy(dst, src, size_t(n)); });
    } else {
      flush();
      std::memcpy(dst, src, size_t(n));
    }
  }
  std::unique_ptr<Backend> cpu_ = make_cpu_backend(1);
};

class QueuedRegistry final : public BackendRegistry {
 public:
  explicit QueuedRegistry(Backend *b) { load_.backend = b; }
  std::unique_ptr<Backend> make_cpu(int64_t threads) override { return make_cpu_backend(threads); }
  const CudaBackendLoad &cuda() override { return load_; }

 private:
  CudaBackendLoad load_;
};

const Device kGpu = Device::cuda(0);

Tensor floats(const std::shared_ptr<Context> &ctx, std::vector<float> v, Device d) {
  return Tensor::from_host(ctx, v.data(), int64_t(v.size() * sizeof(float)), Shape{int64_t(v.size())}, DType::F32, d);
}

std::vector<float> read(const Tensor &t) {
  std::vector<float> v(size_t(t.numel()));
  t.copy_to_host(v.data(), t.nbytes());
  return v;
}

void pinned_copies(QueuedBackend &gpu, const std::shared_ptr<Context> &ctx) {
  g_case = "a pinned source refilled while its copy to the GPU is queued";
  {
    Tensor pinned = Tensor::empty_pinned(ctx, Shape{4}, DType::F32);
    const float first[4] = {1, 2, 3, 4}, second[4] = {5, 6, 7, 8};
    pinned.copy_from_host(first, sizeof first);
    Tensor sent = pinned.to(kGpu);
    check(gpu.pending() == 1, "the copy to the GPU is asynchronous (queued)");
    pinned.copy_from_host(second, sizeof second);  // the refill: must wait for the copy
    check(read(sent) == std::vector<float>({1, 2, 3, 4}), "the GPU got the bytes before the refill");
    check(read(pinned) == std::vector<float>({5, 6, 7, 8}), "the pinned tensor holds the refill");
  }

  g_case = "a pinned destination read while the copy into it is queued";
  {
    Tensor on_gpu = floats(ctx, {9, 10, 11, 12}, kGpu);
    Tensor pinned = Tensor::empty_pinned(ctx, Shape{4}, DType::F32);
    std::vector<float> zeros(4, 0.0f);
    pinned.copy_from_host(zeros.data(), 16);
    pinned.copy_from(on_gpu);
    check(gpu.pending() == 1, "the copy into pinned memory is asynchronous (queued)");
    check(read(pinned) == std::vector<float>({9, 10, 11, 12}), "copy_to_host waits for it");
    pinned.copy_from_host(zeros.data(), 16);
    pinned.copy_from(on_gpu);
    check(pinned.rows(1, 2).item() == 10, "item waits for it (through a view)");
    pinned.copy_from_host(zeros.data(), 16);
    pinned.copy_from(on_gpu);
    check(read(unary(UnaryOp::Neg, pinned, 0)) == std::vector<float>({-9, -10, -11, -12}),
          "a CPU op reads it after the copy");
    pinned.copy_from_host(zeros.data(), 16);
    pinned.copy_from(on_gpu);
    check(read(pinned.clone()) == std::vector<float>({9, 10, 11, 12}), "a clone copies it after the copy");
    pinned.copy_from_host(zeros.data(), 16);
    pinned.copy_from(on_gpu);
    DLManagedTensorVersioned *exported = to_dlpack(pinned, 0);
    const float *seen = static_cast<const float *>(exported->dl_tensor.data);
    check(seen[0] == 9 && seen[3] == 12, "a DLPack export hands over the copied bytes");
    exported->deleter(exported);
  }

  g_case = "a pinned tensor freed with a copy still queued";
  {
    Tensor sent;
    {
      Tensor pinned = Tensor::empty_pinned(ctx, Shape{2}, DType::F32);
      const float v[2] = {3, 4};
      pinned.copy_from_host(v, sizeof v);
      sent = pinned.to(kGpu);
    }  // the last reference: the queued copy runs before the memory goes
    check(gpu.pending() == 0, "the copy ran before the free");
    check(read(sent) == std::vector<float>({3, 4}), "and read the bytes it was given");
  }
}

void dlpack_frees(QueuedBackend &gpu, const std::shared_ptr<Context> &ctx) {
  g_case = "a DLPack import released while kiln's copy from it is queued";
  {
    float *producer_memory = static_cast<float *>(std::malloc(4 * sizeof(float)));
    for (int i = 0; i < 4; ++i) producer_memory[i] = float(20 + i);
    int64_t shape[1] = {4};
    bool released = false;
    size_t pending_at_release = 99;
    struct Producer {
      DLManagedTensorVersioned managed{};
      std::function<void()> on_delete;
    } producer;
    producer.managed.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    producer.managed.manager_ctx = &producer;
    producer.managed.deleter = [](DLManagedTensorVersioned *self) {
      static_cast<Producer *>(self->manager_ctx)->on_delete();
    };
    producer.managed.dl_tensor.data = producer_memory;
    producer.managed.dl_tensor.device = {kDLCUDA, 0};
    producer.managed.dl_tensor.ndim = 1;
    producer.managed.dl_tensor.dtype = {kDLFloat, 32, 1};
    producer.managed.dl_tensor.shape = shape;
    producer.on_delete = [&] {
      released = true;
      pending_at_release = gpu.pending();
      std::memset(producer_memory, 0xff, 4 * sizeof(float));  // the producer reuses its memory at once
    };
    Tensor pinned = Tensor::empty_pinned(ctx, Shape{4}, DType::F32);
    {
      Tensor imported;
      from_dlpack(ctx, &producer.managed, [&](const Tensor &t) { imported = t; });
      pinned.copy_from(imported);  // queued: reads the producer's memory later
      check(gpu.pending() == 1, "kiln's copy from the import is queued");
    }  // kiln's last reference goes: the producer's deleter runs
    check(released && pending_at_release == 0, "the deleter ran only after kiln's queued work on the memory");
    check(read(pinned) == std::vector<float>({20, 21, 22, 23}), "kiln's copy read the producer's bytes");
    std::free(producer_memory);
  }

  g_case = "a DLPack export of GPU memory dropped by its consumer";
  {
    gpu.calls.clear();
    DLManagedTensorVersioned *exported = nullptr;
    {
      Tensor t = floats(ctx, {1, 2}, kGpu);
      exported = to_dlpack(t, 0);
    }  // kiln's handle is gone; the export holds the memory
    gpu.calls.clear();
    exported->deleter(exported);  // the consumer drops it (its kernels may still read it)
    check(gpu.calls == std::vector<std::string>({"synchronize_device", "free"}),
          "the free waits for the whole device first");

    gpu.calls.clear();
    { Tensor t = floats(ctx, {1, 2}, kGpu); }
    check(gpu.calls == std::vector<std::string>({"free"}), "memory never exported is freed in stream order, no wait");
  }
}

}  // namespace

int main() {
  try {
    QueuedBackend gpu;
    QueuedRegistry registry(&gpu);
    ContextOptions options;
    options.threads = 1;
    options.log_level = KILN_LOG_ERROR;
    std::shared_ptr<Context> ctx = Context::create(options, registry);
    check(ctx->cuda_available(), "the queued backend stands in for CUDA");
    pinned_copies(gpu, ctx);
    dlpack_frees(gpu, ctx);
  } catch (const Error &e) {
    std::fprintf(stderr, "FAIL [%s] unexpected error: %s\n", g_case.c_str(), e.what());
    return 1;
  }
  return kiln::test::finish("async_copies_test");
}
