/*
 * kiln/dlpack.h — zero-copy tensor exchange with other tools through DLPack.
 *
 * The first part declares the DLPack 1.x ABI (the versioned managed tensor,
 * DLManagedTensorVersioned) as the DLPack specification defines it
 * (https://dmlc.github.io/dlpack/latest/, Apache-2.0): same names, field
 * order and types, so a DLManagedTensorVersioned * passes unchanged between
 * kiln and NumPy, PyTorch, CuPy, JAX or any C library. It uses the official
 * header's include guard: include dlpack/dlpack.h before this header to use
 * its definitions instead (a later include of it is then a no-op). Only the
 * enumerators kiln needs are listed; others are valid values all the same.
 *
 * The second part declares kiln's two functions. Conventions are kiln.h's.
 */
#ifndef KILN_DLPACK_H
#define KILN_DLPACK_H

#include <stdint.h>

#include "kiln/kiln.h"

#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

/* The DLPack version this header declares (DLManagedTensorVersioned.version).
 * A consumer refuses a different major version; minor versions only add. */
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

/* Where the data lives. Values from the DLPack specification. */
#ifdef __cplusplus
typedef enum : int32_t {
#else
typedef enum {
#endif
  kDLCPU = 1,         /* host memory */
  kDLCUDA = 2,        /* CUDA device memory */
  kDLCUDAHost = 3,    /* page-locked host memory (cudaMallocHost) */
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id; /* 0 for the CPU */
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U
} DLDataTypeCode;

/* code (a DLDataTypeCode), bits per lane, lanes (1 for scalars). */
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void *data;           /* the first byte is data + byte_offset */
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;       /* ndim entries */
  int64_t *strides;     /* ndim entries, in elements; NULL = compact row-major */
  uint64_t byte_offset;
} DLTensor;

/* The unversioned managed tensor of DLPack 0.x ("dltensor" capsules). kiln's
 * functions do not take it; it is here for callers bridging older tools. */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

/* Bits of DLManagedTensorVersioned.flags. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)  /* the consumer must not write */
#define DLPACK_FLAG_BITMASK_IS_COPIED (UINT64_C(1) << 1)  /* the producer made a copy for this export */
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (UINT64_C(1) << 2)

/* A tensor handed from a producer to a consumer. The consumer calls
 * deleter(self) once when done (deleter may be NULL: nothing to free). */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

#ifdef __cplusplus
}
#endif

#endif /* DLPACK_DLPACK_H_ */

#ifdef __cplusplus
extern "C" {
#endif

/* Exports tensor through DLPack without copying: *out describes the same
 * memory (writes through either side show in the other) and holds its own
 * reference to it, so the memory stays valid after kiln_tensor_release and
 * kiln_context_release until the consumer calls (*out)->deleter(*out),
 * exactly once, from any thread (the deleter is thread-safe). The caller
 * owns *out until it hands it to a consumer.
 *
 * The description: version {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
 * device kDLCPU (device_id 0) for a CPU tensor, kDLCUDAHost for one made by
 * kiln_tensor_empty_pinned while CUDA is usable (page-locked memory), kDLCUDA
 * with the index for cuda:N; dtype f32/f16/f64 -> kDLFloat 32/16/64, bf16 ->
 * kDLBfloat 16, i32/i64 -> kDLInt 32/64, u8 -> kDLUInt 8, one lane; shape
 * and row-major strides (in elements, never NULL) owned by *out; data points
 * at the tensor's first element (views included) and byte_offset is 0.
 *
 * flags: 0, or DLPACK_FLAG_BITMASK_READ_ONLY to mark the export read-only
 * (the bit is then set in (*out)->flags: a consumer honouring DLPack must
 * not write through it; kiln itself may still write the tensor). Other
 * bits give INVALID_ARGUMENT. IS_COPIED is never set: there is no copy.
 *
 * Pending device work on the tensor: kiln queues work on one stream per
 * device; call kiln_device_synchronize before another tool reads CUDA
 * memory on its own stream.
 *
 * Errors: INVALID_ARGUMENT (NULL tensor or out, unknown flags),
 * INVALID_HANDLE (a released tensor), OUT_OF_MEMORY. Thread: any. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_to_dlpack(const kiln_tensor *tensor, uint64_t flags,
                                                          DLManagedTensorVersioned **out);

/* Imports a DLPack tensor without copying: *out is a kiln tensor over the
 * producer's memory (writes show on both sides) on ctx.
 *
 * Ownership: on success kiln owns managed and calls managed->deleter
 * (unless NULL) exactly once, when the last kiln reference to the memory
 * goes (the tensor, its views, datasets or models that keep it), on the
 * thread that drops it; the caller must not call the deleter or use managed
 * afterwards. On any failure kiln does not take ownership: it neither calls
 * the deleter nor keeps the pointer, and the caller still owns managed (as
 * DLPack prescribes for a consumer that refuses a tensor).
 *
 * Accepted: version.major == DLPACK_MAJOR_VERSION (any minor); device kDLCPU
 * (a CPU tensor), kDLCUDAHost (a pinned CPU tensor: kiln_tensor_is_pinned
 * says 1) or kDLCUDA with a device_id that ctx can use (cuda:N); dtypes that
 * map to kiln's (kDLFloat 16/32/64, kDLBfloat 16, kDLInt 32/64, kDLUInt 8,
 * one lane); 0 <= ndim <= KILN_MAX_DIMS; strides NULL or those of a compact
 * row-major layout (dimensions of size 1 may have any stride); any
 * byte_offset (the tensor starts at data + byte_offset).
 *
 * Refused:
 *   INVALID_ARGUMENT  NULL ctx, managed or out; ndim < 0 or NULL shape with
 *                     ndim > 0; a negative size; sizes whose product
 *                     overflows int64; NULL data with elements; a
 *                     byte_offset that puts the tensor's first or last
 *                     byte past the end of the address space;
 *   NOT_SUPPORTED     another major version (the message names both), a
 *                     dtype kiln lacks (bool, complex, vectors of lanes,
 *                     i8, i16, u16, ...), a device kind kiln does not run
 *                     (ROCm, Metal, CUDA managed memory, ...), more than
 *                     KILN_MAX_DIMS dimensions, a strided (non-contiguous)
 *                     layout (make it contiguous first), and read-only
 *                     tensors (DLPACK_FLAG_BITMASK_READ_ONLY): kiln tensors
 *                     are writable and kiln does not copy behind the
 *                     caller's back; copy it first (e.g. NumPy's .copy());
 *   DEVICE_UNAVAILABLE kDLCUDA on an index ctx cannot use (no CUDA, or past
 *                     the device count);
 *   INVALID_HANDLE    a released ctx; OUT_OF_MEMORY.
 * Thread: any; the producer must keep the memory valid until its deleter
 * runs, and must not free it behind kiln's back. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_from_dlpack(kiln_context *ctx, DLManagedTensorVersioned *managed,
                                                            kiln_tensor **out);

#ifdef __cplusplus
}
#endif

#endif /* KILN_DLPACK_H */
