// DLPack export and import. See core/dlpack.hpp and include/kiln/dlpack.h.
#include "core/dlpack.hpp"

#include <atomic>
#include <cstdint>
#include <new>
#include <string>

#include "core/context.hpp"
#include "core/error.hpp"

namespace kiln {

namespace {

DLDataType to_dl(DType d) {
  switch (d) {
    case DType::F32: return {kDLFloat, 32, 1};
    case DType::F16: return {kDLFloat, 16, 1};
    case DType::BF16: return {kDLBfloat, 16, 1};
    case DType::F64: return {kDLFloat, 64, 1};
    case DType::I32: return {kDLInt, 32, 1};
    case DType::I64: return {kDLInt, 64, 1};
    case DType::U8: return {kDLUInt, 8, 1};
  }
  fail(KILN_ERROR_INTERNAL, "unknown dtype");
}

std::string dl_name(DLDataType t) {
  const char *code = t.code == kDLInt ? "int" : t.code == kDLUInt ? "uint" : t.code == kDLFloat ? "float"
                     : t.code == kDLBfloat ? "bfloat" : t.code == kDLBool ? "bool" : t.code == kDLComplex ? "complex"
                     : t.code == kDLOpaqueHandle ? "opaque" : nullptr;
  std::string s = code ? code : "code " + std::to_string(t.code) + " ";
  s += std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

DType from_dl(DLDataType t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return DType::F32;
    if (t.code == kDLFloat && t.bits == 16) return DType::F16;
    if (t.code == kDLFloat && t.bits == 64) return DType::F64;
    if (t.code == kDLBfloat && t.bits == 16) return DType::BF16;
    if (t.code == kDLInt && t.bits == 32) return DType::I32;
    if (t.code == kDLInt && t.bits == 64) return DType::I64;
    if (t.code == kDLUInt && t.bits == 8) return DType::U8;
  }
  fail(KILN_ERROR_NOT_SUPPORTED, "DLPack dtype " + dl_name(t) +
                                     " has no kiln dtype (kiln has float16/32/64, bfloat16, int32, int64, uint8)");
}

std::string dl_device_name(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU: return "kDLCPU";
    case kDLCUDA: return "kDLCUDA:" + std::to_string(d.device_id);
    case kDLCUDAHost: return "kDLCUDAHost";
    case kDLCUDAManaged: return "kDLCUDAManaged (CUDA managed memory)";
    case kDLROCM: return "kDLROCM";
    case kDLROCMHost: return "kDLROCMHost";
    case kDLMetal: return "kDLMetal";
    case kDLOpenCL: return "kDLOpenCL";
    case kDLVulkan: return "kDLVulkan";
    default: return "device type " + std::to_string(int(d.device_type));
  }
}

// What an exported tensor owns: the DLPack struct (first, so the struct's
// address is the holder's), a reference to the storage, shape and strides.
struct Export {
  DLManagedTensorVersioned managed{};
  Tensor tensor;
  bool writable = false;  // counted in the storage's foreign writers while held
  int64_t shape[KILN_MAX_DIMS] = {};
  int64_t strides[KILN_MAX_DIMS] = {};
};

// Drops kiln's reference. Runs on any thread: the last reference may free
// the memory through its backend, which is thread-safe, as is the
// reference count. A C callback: nothing may escape it.
void export_deleter(DLManagedTensorVersioned *self) noexcept {
  if (!self) return;
  try {
    Export *holder = static_cast<Export *>(self->manager_ctx);
    if (holder->writable) holder->tensor.end_foreign_writes();
    delete holder;
  } catch (...) {
  }
}

}  // namespace

DLManagedTensorVersioned *to_dlpack(const Tensor &t, uint64_t flags) {
  check(t.defined(), KILN_ERROR_INVALID_ARGUMENT, "an undefined tensor");
  check((flags & ~uint64_t(DLPACK_FLAG_BITMASK_READ_ONLY)) == 0, KILN_ERROR_INVALID_ARGUMENT,
        "DLPack export flags may only hold DLPACK_FLAG_BITMASK_READ_ONLY, got " + std::to_string(flags));
  // The consumer reads the memory as soon as it has it: copies still filling
  // a pinned tensor end first. A consumer's kernels may still read device
  // memory after it drops the export, on streams kiln cannot see: freeing
  // that storage waits for the whole device (Storage::exported).
  t.wait_host_access();
  t.mark_exported();
  auto holder = std::make_unique<Export>();
  holder->tensor = t;
  DLManagedTensorVersioned &m = holder->managed;
  m.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  m.manager_ctx = holder.get();
  m.deleter = export_deleter;
  m.flags = flags;
  // Whoever holds a writable export may write the memory behind kiln's back
  // until they give it back: nothing derived from it is kept meanwhile.
  holder->writable = (flags & DLPACK_FLAG_BITMASK_READ_ONLY) == 0;
  if (holder->writable) t.begin_foreign_writes();
  DLTensor &d = m.dl_tensor;
  const Device dev = t.device();
  if (dev.is_cpu())
    d.device = {t.pinned() && t.context()->cuda_available() ? kDLCUDAHost : kDLCPU, 0};
  else
    d.device = {kDLCUDA, int32_t(dev.index)};
  d.data = t.numel() > 0 ? t.data() : nullptr;
  d.ndim = t.ndim();
  d.dtype = to_dl(t.dtype());
  int64_t stride = 1;
  for (int i = t.ndim() - 1; i >= 0; --i) {
    holder->shape[i] = t.dim(i);
    holder->strides[i] = stride;
    stride *= t.dim(i) > 0 ? t.dim(i) : 1;
  }
  d.shape = holder->shape;
  d.strides = holder->strides;
  d.byte_offset = 0;
  return &holder.release()->managed;
}

void from_dlpack(const std::shared_ptr<Context> &ctx, DLManagedTensorVersioned *managed,
                 const std::function<void(const Tensor &)> &adopt) {
  check(managed != nullptr, KILN_ERROR_INVALID_ARGUMENT, "managed is NULL");
  check(managed->version.major == DLPACK_MAJOR_VERSION, KILN_ERROR_NOT_SUPPORTED,
        "the DLPack tensor has version " + std::to_string(managed->version.major) + "." +
            std::to_string(managed->version.minor) + " but kiln speaks DLPack " +
            std::to_string(DLPACK_MAJOR_VERSION) + "." + std::to_string(DLPACK_MINOR_VERSION) +
            " (major versions must match)");
  check((managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) == 0, KILN_ERROR_NOT_SUPPORTED,
        "the DLPack tensor is read-only (DLPACK_FLAG_BITMASK_READ_ONLY) and kiln tensors are writable: "
        "export a writable tensor or a copy");
  const DLTensor &d = managed->dl_tensor;
  check(d.ndim >= 0, KILN_ERROR_INVALID_ARGUMENT, "the DLPack tensor has ndim " + std::to_string(d.ndim));
  check(d.ndim <= KILN_MAX_DIMS, KILN_ERROR_NOT_SUPPORTED,
        "the DLPack tensor has " + std::to_string(d.ndim) + " dimensions; kiln tensors have at most " +
            std::to_string(KILN_MAX_DIMS));
  check(d.ndim == 0 || d.shape != nullptr, KILN_ERROR_INVALID_ARGUMENT, "the DLPack tensor has a NULL shape");
  const DType dtype = from_dl(d.dtype);

  Shape shape;
  shape.ndim = d.ndim;
  bool empty = false;
  int64_t product = 1;  // of the non-zero sizes, so the stride check below cannot overflow
  for (int i = 0; i < d.ndim; ++i) {
    check(d.shape[i] >= 0, KILN_ERROR_INVALID_ARGUMENT,
          "the DLPack tensor has size " + std::to_string(d.shape[i]) + " in dimension " + std::to_string(i));
    shape.d[i] = d.shape[i];
    empty = empty || d.shape[i] == 0;
    if (d.shape[i] != 0)
      check(!__builtin_mul_overflow(product, d.shape[i], &product), KILN_ERROR_INVALID_ARGUMENT,
            "the DLPack tensor has more elements than fit in int64 (size " + std::to_string(d.shape[i]) +
                " in dimension " + std::to_string(i) + ")");
  }
  // kiln's storage is contiguous row-major: the strides must be those, but
  // a dimension of size 1 may carry any stride (it is never stepped over),
  // and a tensor without elements has no layout at all.
  if (d.strides && !empty) {
    int64_t expected = 1;
    for (int i = d.ndim - 1; i >= 0; --i) {
      if (d.shape[i] != 1)
        check(d.strides[i] == expected, KILN_ERROR_NOT_SUPPORTED,
              "the DLPack tensor of shape " + shape.str() + " has stride " + std::to_string(d.strides[i]) +
                  " in dimension " + std::to_string(i) + " where a contiguous row-major tensor has " +
                  std::to_string(expected) + ": kiln takes only contiguous tensors (make it contiguous first)");
      expected *= d.shape[i];
    }
  }

  Device device;
  bool pinned = false;
  switch (d.device.device_type) {
    case kDLCPU: device = Device::cpu(); break;
    case kDLCUDAHost: device = Device::cpu(); pinned = true; break;
    case kDLCUDA:
      check(d.device.device_id >= 0, KILN_ERROR_DEVICE_UNAVAILABLE,
            "the DLPack tensor is on CUDA device " + std::to_string(d.device.device_id));
      device = Device::cuda(d.device.device_id);
      break;
    default:
      fail(KILN_ERROR_NOT_SUPPORTED, "the DLPack tensor is on " + dl_device_name(d.device) +
                                         "; kiln takes kDLCPU, kDLCUDAHost and kDLCUDA");
  }
  check(empty || d.data != nullptr, KILN_ERROR_INVALID_ARGUMENT, "the DLPack tensor has NULL data");
  // data + byte_offset must be an address: an offset that wraps around the
  // address space describes no memory (and the sum would be undefined).
  check(!d.data || d.byte_offset <= UINTPTR_MAX - reinterpret_cast<uintptr_t>(d.data), KILN_ERROR_INVALID_ARGUMENT,
        "the DLPack tensor's byte_offset " + std::to_string(d.byte_offset) + " runs past the end of the address space");
  // So must its last byte: a tensor that runs past the end describes no
  // memory either (data + byte_offset = 2^64 - 64 with 256 bytes after it).
  if (d.data && !empty) {
    const uintptr_t start = reinterpret_cast<uintptr_t>(d.data) + uintptr_t(d.byte_offset);
    uint64_t bytes = 0;
    check(!__builtin_mul_overflow(uint64_t(product), uint64_t(dtype_size(dtype)), &bytes) &&
              bytes - 1 <= UINTPTR_MAX - start,
          KILN_ERROR_INVALID_ARGUMENT,
          "the DLPack tensor of shape " + shape.str() + " at byte_offset " + std::to_string(d.byte_offset) +
              " runs past the end of the address space");
  }
  void *data = d.data ? static_cast<char *>(d.data) + d.byte_offset : nullptr;
  // Ownership passes only when adopt returns: wrap never runs release when
  // it throws, and a throwing adopt disarms it before the tensor goes.
  auto armed = std::make_shared<std::atomic<bool>>(true);
  Tensor t = Tensor::wrap(ctx, data, shape, dtype, device, pinned, [managed, armed] {
    if (armed->load() && managed->deleter) managed->deleter(managed);
  });
  try {
    adopt(t);
  } catch (...) {
    armed->store(false);
    throw;
  }
}

}  // namespace kiln
