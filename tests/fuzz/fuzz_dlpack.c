/*
 * Fuzzes DLPack import, kiln_tensor_from_dlpack, with hostile
 * DLManagedTensorVersioned structs built from the input's bytes: versions,
 * flags, device types and ids, ndim, dtypes (code, bits, lanes), shapes and
 * strides (NULL or not), byte offsets and NULL data. kiln may refuse a
 * struct only with INVALID_ARGUMENT, NOT_SUPPORTED or DEVICE_UNAVAILABLE,
 * and then must not call the deleter (the caller keeps ownership); an
 * accepted one must describe the same shape, and its deleter must run
 * exactly once, when the tensor is released.
 *
 * The data a struct describes is backed by a heap block of exactly its size
 * (offset included) when that is small, so ASan catches a read past it, and
 * the harness then reads the tensor back; a struct describing more memory
 * than that gets a one-byte block that kiln must not read on import.
 */
#include "fuzz_support.h" /* first: it defines _GNU_SOURCE */

#include <string.h>

#include "kiln/dlpack.h"

#define MAX_BACKED_BYTES 4096
#define MAX_NDIM_READ 40 /* beyond KILN_MAX_DIMS, so refusals of large ndim are reached */

/* Reads the input front to back; past its end every byte is 0. */
typedef struct {
  const uint8_t *data;
  size_t size, at;
} reader;

static uint64_t take(reader *r, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= (uint64_t)(r->at < r->size ? r->data[r->at++] : 0) << (8 * i);
  return v;
}

/* A count or size: mostly small values (as real tensors have), else any
 * 64-bit pattern (negative, huge, overflowing products). */
static int64_t take_size(reader *r) {
  const uint8_t kind = (uint8_t)take(r, 1);
  if (kind < 0xc0) return kind & 7;
  if (kind < 0xf0) return (int64_t)take(r, 2);
  return (int64_t)take(r, 8);
}

typedef struct {
  DLManagedTensorVersioned managed;
  int64_t shape[MAX_NDIM_READ], strides[MAX_NDIM_READ];
  int deleted;
} hostile;

static void count_deleter(DLManagedTensorVersioned *self) { ++((hostile *)self->manager_ctx)->deleted; }

/* The byte size the struct describes, or -1 when it is not small: the
 * product of the sizes, times the element size, plus byte_offset. */
static int64_t described_bytes(const DLTensor *t) {
  if (t->ndim < 0 || t->ndim > MAX_NDIM_READ || (t->ndim > 0 && !t->shape)) return -1;
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) {
    if (t->shape[i] < 0) return -1;
    if (t->shape[i] == 0) return t->byte_offset <= MAX_BACKED_BYTES ? (int64_t)t->byte_offset : -1;
    if (t->shape[i] > MAX_BACKED_BYTES || n * t->shape[i] > MAX_BACKED_BYTES) n = MAX_BACKED_BYTES + 1;
    else n *= t->shape[i];
  }
  const int64_t bytes = n * ((t->dtype.bits + 7) / 8) * (t->dtype.lanes ? t->dtype.lanes : 1);
  return bytes <= MAX_BACKED_BYTES && t->byte_offset <= MAX_BACKED_BYTES ? bytes + (int64_t)t->byte_offset : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader r = {data, size, 0};
  hostile *h = calloc(1, sizeof *h);
  if (!h) kiln_fuzz_die("out of memory");
  DLManagedTensorVersioned *m = &h->managed;
  const uint8_t version = (uint8_t)take(&r, 1);
  m->version.major = version < 0xe0 ? DLPACK_MAJOR_VERSION : (uint32_t)take(&r, 4);
  m->version.minor = (uint32_t)take(&r, 1);
  m->manager_ctx = h;
  m->deleter = take(&r, 1) < 0x10 ? NULL : count_deleter;
  const uint8_t flags = (uint8_t)take(&r, 1);
  m->flags = flags < 0xc0 ? 0 : flags < 0xe0 ? DLPACK_FLAG_BITMASK_IS_COPIED : take(&r, 8);

  DLTensor *t = &m->dl_tensor;
  const uint8_t device = (uint8_t)take(&r, 1);
  t->device.device_type = device < 0x80 ? kDLCPU : device < 0xa0 ? kDLCUDAHost : device < 0xc0 ? kDLCUDA
                                                                                                : (int32_t)take(&r, 4);
  t->device.device_id = (int32_t)(device & 1 ? take(&r, 4) : 0);
  t->ndim = (int8_t)take(&r, 1); /* -128..127: negative and too many dimensions too */
  t->dtype.code = (uint8_t)take(&r, 1);
  t->dtype.bits = (uint8_t)take(&r, 1);
  t->dtype.lanes = (uint16_t)take(&r, 2);
  const uint8_t layout = (uint8_t)take(&r, 1);
  const int dims = t->ndim < 0 ? 0 : t->ndim > MAX_NDIM_READ ? MAX_NDIM_READ : t->ndim;
  for (int i = 0; i < dims; ++i) h->shape[i] = take_size(&r);
  for (int i = 0; i < dims; ++i) h->strides[i] = take_size(&r);
  /* ndim past MAX_NDIM_READ points at fewer entries than it claims; kiln
   * refuses more than KILN_MAX_DIMS before reading them, and ASan says so if
   * it does not. */
  t->shape = layout & 1 ? NULL : h->shape;
  t->strides = layout & 2 ? h->strides : NULL;
  t->byte_offset = layout & 4 ? (uint64_t)take_size(&r) : 0;

  const int64_t bytes = described_bytes(t);
  const size_t block_size = bytes > 0 ? (size_t)bytes : 1;
  uint8_t *block = malloc(block_size);
  if (!block) kiln_fuzz_die("out of memory");
  for (size_t i = 0; i < block_size; ++i) block[i] = (uint8_t)(i * 7);
  t->data = layout & 8 ? NULL : block;

  static const kiln_status allowed[] = {KILN_ERROR_INVALID_ARGUMENT, KILN_ERROR_NOT_SUPPORTED,
                                        KILN_ERROR_DEVICE_UNAVAILABLE};
  kiln_tensor *tensor = NULL;
  kiln_status status = kiln_tensor_from_dlpack(kiln_fuzz_context(), m, &tensor);
  kiln_fuzz_expect("kiln_tensor_from_dlpack", status, allowed, 3);
  if (status != KILN_OK) {
    if (tensor) kiln_fuzz_die("kiln_tensor_from_dlpack failed but left *out set");
    if (h->deleted) kiln_fuzz_die("kiln_tensor_from_dlpack called the deleter of a tensor it refused");
  } else {
    int64_t ndim = -1, numel = -1, shape[KILN_MAX_DIMS];
    if (kiln_tensor_ndim(tensor, &ndim) != KILN_OK || ndim != t->ndim ||
        kiln_tensor_shape(tensor, shape, KILN_MAX_DIMS) != KILN_OK || kiln_tensor_numel(tensor, &numel) != KILN_OK)
      kiln_fuzz_die("an imported tensor does not describe its DLPack struct");
    for (int i = 0; i < ndim; ++i)
      if (shape[i] != t->shape[i]) kiln_fuzz_die("an imported tensor has another shape than its DLPack struct");
    if (bytes >= 0 && t->data && numel > 0) {
      /* Backed: read it all back; it must be the block's bytes after the offset. */
      const size_t n = (size_t)bytes - (size_t)t->byte_offset;
      uint8_t *copy = malloc(n);
      if (!copy) kiln_fuzz_die("out of memory");
      if (kiln_tensor_copy_to_host(tensor, copy, (int64_t)n) != KILN_OK) kiln_fuzz_die(kiln_last_error());
      if (memcmp(copy, block + t->byte_offset, n) != 0) kiln_fuzz_die("an imported tensor reads other bytes");
      free(copy);
    }
    if (h->deleted) kiln_fuzz_die("the deleter ran while the tensor was alive");
    kiln_tensor_release(tensor);
    if (h->deleted != (m->deleter ? 1 : 0)) kiln_fuzz_die("the deleter did not run exactly once at release");
  }
  free(block);
  free(h);
  return 0;
}
