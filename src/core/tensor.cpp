// Storage lifetime, tensor creation, views and copies between devices.
//
// Tensors without elements allocate nothing: their storage holds a null
// pointer and every copy or kernel on them is skipped, so backends never see a
// zero-byte request.
#include "core/tensor.hpp"

#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "core/context.hpp"
#include "core/number_text.hpp"

namespace kiln {

namespace {

// Bytes of a shape of dtype, validating the shape on the way: internal
// callers build shapes by hand, so this is the last line before an alloc.
// Messages are built only on failure: a prediction allocates its result
// through here and nothing else (nn/model_inference.cpp).
int64_t byte_size(const Shape &shape, DType dtype) {
  if (shape.ndim < 0 || shape.ndim > KILN_MAX_DIMS)
    fail(KILN_ERROR_INVALID_ARGUMENT,
         "ndim must be in [0, " + std::to_string(KILN_MAX_DIMS) + "], got " + std::to_string(shape.ndim));
  int64_t bytes = dtype_size(dtype);
  bool empty = false;
  for (int i = 0; i < shape.ndim; ++i) {
    if (shape[i] < 0) fail(KILN_ERROR_INVALID_ARGUMENT, "shape " + shape.str() + " has a negative size");
    if (shape[i] == 0) empty = true;
    else if (__builtin_mul_overflow(bytes, shape[i], &bytes))
      fail(KILN_ERROR_INVALID_ARGUMENT, "a " + std::string(dtype_name(dtype)) + " tensor of shape " + shape.str() +
                                            " would need more bytes than fit in int64");
  }
  return empty ? 0 : bytes;
}

std::string describe(const Shape &shape, DType dtype) { return shape.str() + " " + dtype_name(dtype); }

}  // namespace

void check_value_fits(DType dtype, double value, const char *what) {
  double lo, hi;  // the dtype's range, as exact doubles
  switch (dtype) {
    case DType::I32: lo = -2147483648.0; hi = 2147483647.0; break;
    case DType::U8: lo = 0.0; hi = 255.0; break;
    // 2^63 is exact; values in (-2^63 - 1, 2^63) truncate into range.
    case DType::I64: lo = -9223372036854775808.0; hi = 9223372036854775807.0; break;
    default: return;
  }
  double t = std::trunc(value);
  bool fits = std::isfinite(value) && t >= lo && (dtype == DType::I64 ? t < hi : t <= hi);
  check(fits, KILN_ERROR_INVALID_ARGUMENT,
        std::string(what) + " " + number_text(value) + " does not fit in " + dtype_name(dtype));
}

void Storage::note_async(Backend *b, int64_t index) {
  if (index < 0 || index >= 64) {  // more devices than bits: wait now instead
    b->synchronize(index);
    return;
  }
  std::lock_guard<std::mutex> lock(async_mutex_);
  if (async_backend_ && async_backend_ != b) {  // one backend tracked at a time
    for (int64_t i = 0; i < 64; ++i)
      if (async_devices_ >> i & 1) async_backend_->synchronize(i);
    async_devices_ = 0;
  }
  async_backend_ = b;
  async_devices_ |= uint64_t(1) << index;
}

void Storage::wait_async() {
  std::lock_guard<std::mutex> lock(async_mutex_);
  for (int64_t i = 0; async_devices_ != 0 && i < 64; ++i)
    if (async_devices_ >> i & 1) {
      async_backend_->synchronize(i);
      async_devices_ &= ~(uint64_t(1) << i);
    }
}

Storage::~Storage() {
  // Copies still queued to or from this memory (pinned host memory) end
  // before it goes back to the allocator or to its foreign owner.
  try {
    wait_async();
  } catch (...) {
    // A broken device: its queued copies will never run; the free below is
    // all there is left to do.
  }
  if (release) {
    // kiln's kernels queued on this foreign device memory end before its
    // owner (a DLPack producer's deleter) may free and reuse it; a broken
    // device runs nothing more, and the memory is given back all the same.
    if (device.kind != KILN_DEVICE_CPU && data) {
      try {
        if (exported.load(std::memory_order_acquire)) backend->synchronize_device(device.index);
        else backend->synchronize(device.index);
      } catch (const std::exception &e) {
        try {
          ctx->log(KILN_LOG_ERROR, std::string("waiting for ") + device.str() +
                                       " before releasing foreign tensor memory failed: " + e.what());
        } catch (...) {
        }
      } catch (...) {
      }
    }
    try {
      release();
    } catch (const std::exception &e) {
      try {
        ctx->log(KILN_LOG_ERROR, std::string("releasing foreign tensor memory failed: ") + e.what());
      } catch (...) {
      }
    } catch (...) {
    }
    return;
  }
  if (!data) return;
  // A destructor must not throw; a failing free leaves a leak, which the
  // backend has no better way to report than the log.
  try {
    if (pinned) {
      allocator->free_pinned(data);
    } else {
      // Exported through DLPack: the consumer's kernels may still read it on
      // its own streams, which kiln's stream-ordered free does not wait for.
      if (exported.load(std::memory_order_acquire)) allocator->synchronize_device(device.index);
      allocator->free(device.index, data);
    }
  } catch (const std::exception &e) {
    try {
      ctx->log(KILN_LOG_ERROR, std::string("freeing tensor memory on ") + device.str() + " failed: " + e.what());
    } catch (...) {
    }
  } catch (...) {
  }
}

Tensor Tensor::empty(const std::shared_ptr<Context> &ctx, const Shape &shape, DType dtype, Device device) {
  if (!ctx) fail(KILN_ERROR_INTERNAL, "Tensor::empty without a context");
  Backend &backend = ctx->backend(device);
  int64_t bytes = byte_size(shape, dtype);
  Tensor t;
  // The storage exists before the memory, so a failing alloc leaves nothing.
  t.storage_ = std::make_shared<Storage>(ctx, &backend, device, nullptr, bytes, false);
  if (bytes > 0) t.storage_->data = backend.alloc(device.index, bytes);
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::empty_pinned(const std::shared_ptr<Context> &ctx, const Shape &shape, DType dtype) {
  check(ctx != nullptr, KILN_ERROR_INTERNAL, "Tensor::empty_pinned without a context");
  // Only the CUDA backend can page-lock memory; without it, pinning would buy
  // nothing, so the CPU backend's ordinary memory stands in.
  Backend &allocator = ctx->cuda_available() ? ctx->backend(Device::cuda(0)) : ctx->cpu();
  int64_t bytes = byte_size(shape, dtype);
  Tensor t;
  t.storage_ = std::make_shared<Storage>(ctx, &ctx->cpu(), Device::cpu(), nullptr, bytes, true, &allocator);
  if (bytes > 0) t.storage_->data = allocator.alloc_pinned(bytes);
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::wrap(const std::shared_ptr<Context> &ctx, void *data, const Shape &shape, DType dtype, Device device,
                    bool pinned, std::function<void()> release) {
  check(ctx != nullptr, KILN_ERROR_INTERNAL, "Tensor::wrap without a context");
  check(!pinned || device.kind == KILN_DEVICE_CPU, KILN_ERROR_INTERNAL, "pinned memory is host memory");
  Backend &backend = ctx->backend(device);
  const int64_t bytes = byte_size(shape, dtype);
  check(bytes == 0 || data != nullptr, KILN_ERROR_INVALID_ARGUMENT,
        "a null data pointer for a " + describe(shape, dtype) + " tensor");
  Tensor t;
  // Nothing below throws once the storage exists, so `release` runs exactly
  // once: from the storage's destructor, never because wrap failed.
  // The data pointer goes in after `release`, so the destructor can never
  // hand foreign memory to a backend's free.
  t.storage_ = std::make_shared<Storage>(ctx, &backend, device, nullptr, bytes, pinned);
  t.storage_->release = std::move(release);
  t.storage_->foreign_writers.store(1);  // its owner may write it at any time
  if (bytes > 0) t.storage_->data = data;
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::full(const std::shared_ptr<Context> &ctx, const Shape &shape, DType dtype, Device device,
                    double value) {
  check_value_fits(dtype, value, "fill value");
  Tensor t = empty(ctx, shape, dtype, device);
  if (t.numel() > 0) t.backend().fill(device.index, FillArgs{dtype, t.numel(), t.data(), value});
  return t;
}

Tensor Tensor::arange(const std::shared_ptr<Context> &ctx, double start, double end, double step, DType dtype,
                      Device device) {
  check(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), KILN_ERROR_INVALID_ARGUMENT,
        "arange needs finite start, end and step, got " + number_text(start) + ", " + number_text(end) + ", " +
            number_text(step));
  check(step != 0.0, KILN_ERROR_INVALID_ARGUMENT, "arange step must not be 0");
  double count = std::ceil((end - start) / step);
  if (!(count > 0.0)) count = 0.0;  // also catches NaN from overflowing end - start
  check(count < 9007199254740992.0, KILN_ERROR_INVALID_ARGUMENT,
        "arange(" + number_text(start) + ", " + number_text(end) + ", " + number_text(step) +
            ") would have more than 2^53 elements");
  int64_t n = int64_t(count);
  if (n > 0) {
    check_value_fits(dtype, start, "arange start");
    check_value_fits(dtype, start + double(n - 1) * step, "arange's last value");
  }
  Tensor t = empty(ctx, Shape{n}, dtype, device);
  if (n > 0) t.backend().arange(device.index, ArangeArgs{dtype, n, t.data(), start, step});
  return t;
}

Tensor Tensor::from_host(const std::shared_ptr<Context> &ctx, const void *data, int64_t nbytes, const Shape &shape,
                         DType dtype, Device device) {
  int64_t expected = byte_size(shape, dtype);
  check(nbytes == expected, KILN_ERROR_INVALID_ARGUMENT,
        "nbytes is " + std::to_string(nbytes) + " but a " + describe(shape, dtype) + " tensor holds " +
            std::to_string(expected) + " bytes");
  Tensor t = empty(ctx, shape, dtype, device);
  t.copy_from_host(data, nbytes);
  return t;
}

Tensor Tensor::reshape(const Shape &target) const {
  Shape resolved = target;
  int infer = -1;
  int64_t known = 1;
  bool overflow = false;
  for (int i = 0; i < target.ndim; ++i) {
    check(target[i] >= -1, KILN_ERROR_INVALID_ARGUMENT,
          "reshape target " + target.str() + " has size " + std::to_string(target[i]) + " at dimension " +
              std::to_string(i));
    if (target[i] == -1) {
      check(infer < 0, KILN_ERROR_SHAPE_MISMATCH, "reshape target " + target.str() + " has more than one -1");
      infer = i;
    } else {
      overflow = overflow || __builtin_mul_overflow(known, target[i], &known);
    }
  }
  const std::string what = "cannot reshape " + shape_.str() + " (" + std::to_string(numel()) + " elements) to " +
                           target.str();
  check(!overflow, KILN_ERROR_SHAPE_MISMATCH, what);
  if (infer >= 0) {
    check(known != 0, KILN_ERROR_SHAPE_MISMATCH, what + ": the -1 could be any size");
    check(numel() % known == 0, KILN_ERROR_SHAPE_MISMATCH, what);
    resolved[infer] = numel() / known;
  } else {
    check(known == numel(), KILN_ERROR_SHAPE_MISMATCH, what);
  }
  // The limit every tensor is created under: an empty tensor's other
  // dimensions too ([2^62, 0] f32 would be refused by every kernel).
  byte_size(resolved, dtype_);
  Tensor t = *this;
  t.shape_ = resolved;
  return t;
}

Tensor Tensor::rows(int64_t start, int64_t end) const {
  check(ndim() >= 1, KILN_ERROR_INVALID_ARGUMENT, "rows needs a tensor with at least one dimension, got shape []");
  check(start >= 0 && start <= end && end <= dim(0), KILN_ERROR_INVALID_ARGUMENT,
        "rows [" + std::to_string(start) + ", " + std::to_string(end) + ") out of range for shape " + shape_.str() +
            " (need 0 <= start <= end <= " + std::to_string(dim(0)) + ")");
  Tensor t = *this;
  t.shape_[0] = end - start;
  // An empty tensor has no storage to point into; its offset stays 0.
  if (dim(0) > 0) t.offset_ += start * (nbytes() / dim(0));
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor out = empty(context(), shape_, dtype_, device);
  out.copy_from(*this);
  return out;
}

void Tensor::copy_to_host(void *dst, int64_t n) const {
  check(n == nbytes(), KILN_ERROR_INVALID_ARGUMENT,
        "nbytes is " + std::to_string(n) + " but the " + describe(shape_, dtype_) + " tensor holds " +
            std::to_string(nbytes()) + " bytes");
  if (n == 0) return;
  check(dst != nullptr, KILN_ERROR_INVALID_ARGUMENT, "host buffer is NULL");
  wait_host_access();
  backend().copy_to_host(device().index, dst, data(), n, false);
}

void Tensor::copy_from_host(const void *src, int64_t n) const {
  check(n == nbytes(), KILN_ERROR_INVALID_ARGUMENT,
        "nbytes is " + std::to_string(n) + " but the " + describe(shape_, dtype_) + " tensor holds " +
            std::to_string(nbytes()) + " bytes");
  if (n == 0) return;
  check(src != nullptr, KILN_ERROR_INVALID_ARGUMENT, "host buffer is NULL");
  // A copy still reading this pinned memory (to a GPU) must not see the new bytes.
  wait_host_access();
  backend().copy_to_device(device().index, data(), src, n, false);
  note_written();
}

void Tensor::wait_host_access() const {
  if (storage_ && storage_->pinned) storage_->wait_async();
}

void Tensor::copy_from(const Tensor &src) const {
  check(src.shape_ == shape_, KILN_ERROR_SHAPE_MISMATCH,
        "cannot copy a tensor of shape " + src.shape_.str() + " into one of shape " + shape_.str());
  check(src.dtype_ == dtype_, KILN_ERROR_DTYPE_MISMATCH,
        std::string("cannot copy a ") + dtype_name(src.dtype_) + " tensor into a " + dtype_name(dtype_) + " tensor");
  const int64_t n = nbytes();
  if (n == 0) return;
  const Device from = src.device(), to = device();
  if (from == to) {
    if (to.is_cpu()) {  // memcpy on the host: wait for copies still using either side
      src.wait_host_access();
      wait_host_access();
    }
    backend().copy_on_device(to.index, data(), src.data(), n);
  } else if (from.is_cpu()) {
    src.wait_host_access();  // a pinned src may still be filling from a device (an earlier copy)
    backend().copy_to_device(to.index, data(), src.data(), n, src.pinned());
    if (src.pinned()) src.storage_->note_async(&backend(), to.index);
  } else if (to.is_cpu()) {
    wait_host_access();  // this pinned memory may still be read by an earlier copy to a device
    src.backend().copy_to_host(from.index, data(), src.data(), n, pinned());
    if (pinned()) storage_->note_async(&src.backend(), from.index);
  } else {
    // Between two GPUs through the host: peer access is not guaranteed, and
    // such copies are rare (moving a model once), so simplicity wins.
    std::unique_ptr<char[]> staging(new (std::nothrow) char[size_t(n)]);
    check(staging != nullptr, KILN_ERROR_OUT_OF_MEMORY,
          "cannot allocate " + std::to_string(n) + " bytes of host memory to copy from " + from.str() + " to " +
              to.str());
    src.backend().copy_to_host(from.index, staging.get(), src.data(), n, false);
    backend().copy_to_device(to.index, data(), staging.get(), n, false);
  }
  note_written();
}

Tensor Tensor::clone() const {
  wait_host_access();
  Tensor out = empty(context(), shape_, dtype_, device());
  if (nbytes() > 0) backend().copy_on_device(device().index, out.data(), data(), nbytes());
  return out;
}

double Tensor::item() const {
  check(numel() == 1, KILN_ERROR_SHAPE_MISMATCH,
        "item needs a tensor with exactly one element, got shape " + shape_.str());
  unsigned char raw[8];
  copy_to_host(raw, nbytes());
  switch (dtype_) {
    case DType::F32: { float v; std::memcpy(&v, raw, 4); return v; }
    case DType::F64: { double v; std::memcpy(&v, raw, 8); return v; }
    case DType::F16: { uint16_t v; std::memcpy(&v, raw, 2); return f16_to_f32(v); }
    case DType::BF16: { uint16_t v; std::memcpy(&v, raw, 2); return bf16_to_f32(v); }
    case DType::I32: { int32_t v; std::memcpy(&v, raw, 4); return v; }
    case DType::I64: { int64_t v; std::memcpy(&v, raw, 8); return double(v); }
    case DType::U8: return raw[0];
  }
  fail(KILN_ERROR_INTERNAL, "item: unknown dtype " + std::to_string(int(dtype_)));
}

}  // namespace kiln
