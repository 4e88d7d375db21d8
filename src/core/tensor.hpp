// Tensor: a typed, shaped window on reference-counted device storage. A
// Tensor is a cheap value (one shared_ptr); views (reshape, rows) share the
// storage. Storage is always contiguous and row-major.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "core/backend.hpp"
#include "core/shape.hpp"

namespace kiln {

class Context;

// One allocation on one device. Keeps its context (and so its backends)
// alive. A zero-byte storage (a tensor with no elements) has data == nullptr
// and never reaches a backend. Foreign memory (Tensor::wrap, for DLPack
// imports) is not kiln's to free: such a storage has `release`, which its
// destructor calls exactly once instead of freeing data through a backend;
// everything else (kernels on `backend`, views, copies) is as for kiln's own.
struct Storage {
  std::shared_ptr<Context> ctx;
  Backend *backend = nullptr;  // runs the kernels on this memory
  Device device;
  void *data = nullptr;
  int64_t bytes = 0;
  bool pinned = false;
  // Frees data: `backend`, except for pinned host memory page-locked by the
  // CUDA backend, which only that backend can free.
  Backend *allocator = nullptr;
  // Set only for foreign memory: gives it back to its owner. Must not throw
  // (exceptions are caught and logged); may run on any thread.
  std::function<void()> release;
  // What is derived from the contents and kept (a model's packed inference
  // weights) is valid while `version` is unchanged. Every write that kiln
  // makes after the contents were first filled bumps it: Tensor::copy_from,
  // copy_from_host, a step program that declares the storage in its
  // `writes` (core/program.hpp), a collective's broadcast into it
  // (Trainer::broadcast_parameters), and the end of a writable DLPack export.
  // Writes kiln cannot see (foreign memory, or a writable DLPack export
  // still held by another tool) make `foreign_writers` non-zero, and while it
  // is, nothing derived may be kept at all.
  std::atomic<uint64_t> version{0};
  std::atomic<int64_t> foreign_writers{0};
  // Exported through DLPack: another library may have queued kernels that
  // read it on streams of its own, so freeing it waits for the whole device
  // first (Backend::synchronize_device).
  std::atomic<bool> exported{false};

  // Host memory with asynchronous copies queued that read or write it (a
  // pinned buffer copied to or from a GPU): bit i of async_devices is device
  // i of async_backend. Host access waits for them (Tensor::wait_host_access).
  void note_async(Backend *b, int64_t index);
  void wait_async();

  Storage(std::shared_ptr<Context> c, Backend *b, Device dev, void *p, int64_t n, bool pin,
          Backend *alloc = nullptr)
      : ctx(std::move(c)), backend(b), device(dev), data(p), bytes(n), pinned(pin), allocator(alloc ? alloc : b) {}
  ~Storage();
  Storage(const Storage &) = delete;
  Storage &operator=(const Storage &) = delete;

 private:
  std::mutex async_mutex_;
  Backend *async_backend_ = nullptr;
  uint64_t async_devices_ = 0;
};

// Throws INVALID_ARGUMENT unless value converts to dtype without undefined
// behaviour: any value for float dtypes; for integer dtypes a finite value
// whose truncation lies in the dtype's range. `what` names it in the message.
void check_value_fits(DType dtype, double value, const char *what);

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised tensor; throws DEVICE_UNAVAILABLE / OUT_OF_MEMORY.
  static Tensor empty(const std::shared_ptr<Context> &ctx, const Shape &shape, DType dtype, Device device);
  static Tensor empty_pinned(const std::shared_ptr<Context> &ctx, const Shape &shape, DType dtype);
  static Tensor full(const std::shared_ptr<Context> &ctx, const Shape &shape, DType dtype, Device device,
                     double value);
  // start, start + step, ... below end (above it for step < 0); step != 0
  // and all three finite (INVALID_ARGUMENT).
  static Tensor arange(const std::shared_ptr<Context> &ctx, double start, double end, double step, DType dtype,
                       Device device);
  // From host bytes (nbytes checked against the shape).
  static Tensor from_host(const std::shared_ptr<Context> &ctx, const void *data, int64_t nbytes, const Shape &shape,
                          DType dtype, Device device);

  // A tensor over memory kiln does not own (zero copy): data on device
  // (pinned: page-locked host memory, device must be the CPU) holding a
  // contiguous row-major shape of dtype. release runs exactly once, when the
  // last tensor or view on the memory is gone, on whichever thread drops it;
  // it never runs when wrap throws (the caller keeps the memory then).
  // Throws DEVICE_UNAVAILABLE for
  // a device the context cannot use, INVALID_ARGUMENT for a bad shape or a
  // null data with elements.
  static Tensor wrap(const std::shared_ptr<Context> &ctx, void *data, const Shape &shape, DType dtype, Device device,
                     bool pinned, std::function<void()> release);

  bool defined() const { return storage_ != nullptr; }
  const Shape &shape() const { return shape_; }
  int ndim() const { return shape_.ndim; }
  int64_t dim(int i) const { return shape_.d[i]; }
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  int64_t nbytes() const { return numel() * dtype_size(dtype_); }
  Device device() const { return storage_->device; }
  bool pinned() const { return storage_->pinned; }
  Backend &backend() const { return *storage_->backend; }
  const std::shared_ptr<Context> &context() const { return storage_->ctx; }
  void *data() const { return static_cast<char *>(storage_->data) + offset_; }
  template <class T> T *data_as() const { return static_cast<T *>(data()); }
  bool shares_storage(const Tensor &o) const { return storage_ == o.storage_; }

  // Write tracking (see Storage::version): the storage's version, a bump for
  // a write made through a raw pointer, and whether code outside kiln may
  // be writing the memory now (no derived copy may be kept then).
  uint64_t version() const { return storage_->version.load(std::memory_order_acquire); }
  void note_written() const { storage_->version.fetch_add(1, std::memory_order_acq_rel); }
  bool foreign_writes() const { return storage_->foreign_writers.load(std::memory_order_acquire) > 0; }
  // Brackets a time when code outside kiln may write the memory (a writable
  // DLPack export); the end counts as a write.
  void begin_foreign_writes() const { storage_->foreign_writers.fetch_add(1, std::memory_order_acq_rel); }
  void end_foreign_writes() const {
    note_written();
    storage_->foreign_writers.fetch_sub(1, std::memory_order_acq_rel);
  }

  // Views. reshape: same numel, at most one -1 (SHAPE_MISMATCH otherwise);
  // rows: [start, end) of dim 0 (INVALID_ARGUMENT when out of range).
  Tensor reshape(const Shape &shape) const;
  Tensor rows(int64_t start, int64_t end) const;

  // Copies: to another device (the same tensor when already there), to the
  // host, from the host, and a contiguous clone. Copies into this tensor
  // bump its storage's version.
  Tensor to(Device device) const;
  // nbytes must equal this->nbytes() (INVALID_ARGUMENT). Both wait for the
  // device, so the host buffer is free to reuse when they return.
  void copy_to_host(void *dst, int64_t nbytes) const;
  void copy_from_host(const void *src, int64_t nbytes) const;
  // Copies src (same shape and dtype, any device) into this tensor. To or
  // from pinned host memory the copy may still be running on return; every
  // host access of that memory through kiln (copies, item, the CPU ops,
  // DLPack export) waits for it first (wait_host_access).
  void copy_from(const Tensor &src) const;
  // Waits for the asynchronous copies queued to or from this tensor's host
  // memory; returns at once when there are none (a pinned tensor's only
  // cost). Call before the host reads or writes a pinned tensor's bytes.
  void wait_host_access() const;
  // The storage has been handed to another library (DLPack export): see
  // Storage::exported.
  void mark_exported() const { storage_->exported.store(true, std::memory_order_release); }
  Tensor clone() const;
  // The value of a one-element tensor (SHAPE_MISMATCH otherwise), exactly
  // as a double for every dtype but i64 beyond 2^53.
  double item() const;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // bytes
  Shape shape_;
  DType dtype_ = DType::F32;
};

}  // namespace kiln
