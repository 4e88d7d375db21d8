/* DLPack (include/kiln/dlpack.h): kiln_tensor_to_dlpack and
 * kiln_tensor_from_dlpack. Round trips for every dtype, shared data (writes
 * through one side read through the other), deleters called exactly once
 * (also from another thread, and only when the last view goes), byte_offset,
 * strides, flags, and every refusal: on failure kiln must not call the
 * producer's deleter (the caller keeps ownership). tests/dlpack_numpy.py
 * checks the same with NumPy and PyTorch. test_dlpack_cuda runs only the
 * GPU half (cuda_round_trip), skipped without a usable CUDA device. */
#include "support.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/dlpack.h"

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};

/* ---- a producer of our own: malloc'd floats and a counting deleter ------ */

typedef struct {
  DLManagedTensorVersioned managed;
  int64_t shape[KILN_MAX_DIMS + 2];
  int64_t strides[KILN_MAX_DIMS + 2];
  float *buffer;
  atomic_int *deleted; /* incremented by the deleter */
} producer;

static void producer_deleter(DLManagedTensorVersioned *self) {
  producer *p = self->manager_ctx;
  atomic_fetch_add(p->deleted, 1);
  free(p->buffer);
  free(p);
}

/* A 1-D f32 tensor of n elements (buffer[i] = i) on the CPU, version 1.0. */
static producer *make_producer(int64_t n, atomic_int *deleted) {
  producer *p = calloc(1, sizeof *p);
  assert_non_null(p);
  p->buffer = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  assert_non_null(p->buffer);
  for (int64_t i = 0; i < n; ++i) p->buffer[i] = (float)i;
  p->deleted = deleted;
  p->shape[0] = n;
  p->managed.version.major = DLPACK_MAJOR_VERSION;
  p->managed.version.minor = DLPACK_MINOR_VERSION;
  p->managed.manager_ctx = p;
  p->managed.deleter = producer_deleter;
  p->managed.flags = 0;
  DLTensor *t = &p->managed.dl_tensor;
  t->data = p->buffer;
  t->device.device_type = kDLCPU;
  t->device.device_id = 0;
  t->ndim = 1;
  t->dtype.code = kDLFloat;
  t->dtype.bits = 32;
  t->dtype.lanes = 1;
  t->shape = p->shape;
  t->strides = NULL;
  t->byte_offset = 0;
  return p;
}

/* ---- export --------------------------------------------------------------- */

static void export_describes_the_tensor(void **state) {
  if (kiln_test_cuda_run()) skip(); /* the CPU cases run in test_dlpack */
  kiln_context *ctx = *state;
  const float values[6] = {1, 2, 3, 4, 5, 6};
  const int64_t shape[2] = {2, 3};
  kiln_tensor *t = kiln_test_tensor_f32(ctx, values, shape, 2, cpu);
  DLManagedTensorVersioned *m = NULL;
  assert_kiln_ok(kiln_tensor_to_dlpack(t, 0, &m));
  assert_non_null(m);
  assert_int_equal(m->version.major, DLPACK_MAJOR_VERSION);
  assert_int_equal(m->version.minor, DLPACK_MINOR_VERSION);
  assert_non_null(m->deleter);
  assert_int_equal(m->flags, 0);
  const DLTensor *d = &m->dl_tensor;
  assert_int_equal(d->device.device_type, kDLCPU);
  assert_int_equal(d->device.device_id, 0);
  assert_int_equal(d->ndim, 2);
  assert_int_equal(d->dtype.code, kDLFloat);
  assert_int_equal(d->dtype.bits, 32);
  assert_int_equal(d->dtype.lanes, 1);
  assert_int_equal(d->shape[0], 2);
  assert_int_equal(d->shape[1], 3);
  assert_non_null(d->strides);
  assert_int_equal(d->strides[0], 3);
  assert_int_equal(d->strides[1], 1);
  assert_int_equal(d->byte_offset, 0);
  float *data = d->data;
  assert_memory_equal(data, values, sizeof values);

  /* Shared both ways: a write through DLPack shows in kiln, and back. */
  data[4] = 50;
  float got[6];
  assert_kiln_ok(kiln_tensor_copy_to_host(t, got, sizeof got));
  assert_true(got[4] == 50);
  const float other[6] = {-1, -2, -3, -4, -5, -6};
  assert_kiln_ok(kiln_tensor_copy_from_host(t, other, sizeof other));
  assert_true(data[0] == -1 && data[5] == -6);

  /* The export keeps the memory alive past the tensor and the context. */
  kiln_tensor_release(t);
  kiln_context *ctx2 = kiln_test_context_create(1);
  kiln_tensor *t2 = NULL;
  assert_kiln_ok(kiln_tensor_zeros(ctx2, shape, 2, KILN_F32, cpu, &t2));
  DLManagedTensorVersioned *m2 = NULL;
  assert_kiln_ok(kiln_tensor_to_dlpack(t2, 0, &m2));
  kiln_tensor_release(t2);
  kiln_context_release(ctx2);
  assert_true(((float *)m2->dl_tensor.data)[5] == 0);
  ((float *)m2->dl_tensor.data)[5] = 1;
  m2->deleter(m2);
  assert_true(data[5] == -6);
  m->deleter(m);
}

static void export_views_and_flags(void **state) {
  if (kiln_test_cuda_run()) skip(); /* the CPU cases run in test_dlpack */
  kiln_context *ctx = *state;
  kiln_tensor *t = NULL, *rows = NULL;
  assert_kiln_ok(kiln_tensor_arange(ctx, 0, 12, 1, KILN_F32, cpu, &t));
  const int64_t shape[2] = {4, 3};
  kiln_tensor *r = NULL;
  assert_kiln_ok(kiln_tensor_reshape(t, shape, 2, &r));
  assert_kiln_ok(kiln_tensor_rows(r, 2, 4, &rows));
  DLManagedTensorVersioned *m = NULL;
  assert_kiln_ok(kiln_tensor_to_dlpack(rows, DLPACK_FLAG_BITMASK_READ_ONLY, &m));
  assert_int_equal(m->flags, DLPACK_FLAG_BITMASK_READ_ONLY);
  assert_int_equal(m->dl_tensor.shape[0], 2);
  /* data points at the view's first element. */
  const float *data = (const float *)((const char *)m->dl_tensor.data + m->dl_tensor.byte_offset);
  assert_true(data[0] == 6 && data[5] == 11);
  m->deleter(m);

  /* Unknown flag bits, NULL arguments, released handles. */
  m = (DLManagedTensorVersioned *)(uintptr_t)1;
  assert_status(kiln_tensor_to_dlpack(t, DLPACK_FLAG_BITMASK_IS_COPIED, &m), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(m);
  assert_status(kiln_tensor_to_dlpack(t, 1u << 7, &m), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_to_dlpack(NULL, 0, &m), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_to_dlpack(t, 0, NULL), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(rows);
  m = (DLManagedTensorVersioned *)(uintptr_t)1;
  assert_status(kiln_tensor_to_dlpack(rows, 0, &m), KILN_ERROR_INVALID_HANDLE);
  assert_null(m);
  kiln_tensor_release(r);
  kiln_tensor_release(t);
}

/* ---- every dtype both ways -------------------------------------------------- */

static void dtypes_round_trip(void **state) {
  if (kiln_test_cuda_run()) skip(); /* the CPU cases run in test_dlpack */
  kiln_context *ctx = *state;
  const struct {
    kiln_dtype dtype;
    uint8_t code, bits;
  } map[] = {{KILN_F32, kDLFloat, 32}, {KILN_F16, kDLFloat, 16}, {KILN_BF16, kDLBfloat, 16},
             {KILN_F64, kDLFloat, 64}, {KILN_I32, kDLInt, 32},   {KILN_I64, kDLInt, 64},
             {KILN_U8, kDLUInt, 8}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; ++i) {
    const int64_t shape[2] = {3, 2};
    kiln_tensor *t = NULL, *back = NULL;
    assert_kiln_ok(kiln_tensor_full(ctx, shape, 2, map[i].dtype, cpu, 3, &t));
    DLManagedTensorVersioned *m = NULL;
    assert_kiln_ok(kiln_tensor_to_dlpack(t, 0, &m));
    assert_int_equal(m->dl_tensor.dtype.code, map[i].code);
    assert_int_equal(m->dl_tensor.dtype.bits, map[i].bits);
    assert_int_equal(m->dl_tensor.dtype.lanes, 1);
    void *exported = m->dl_tensor.data;
    /* Back into kiln: the same memory, the same dtype. */
    assert_kiln_ok(kiln_tensor_from_dlpack(ctx, m, &back));
    kiln_dtype dtype;
    assert_kiln_ok(kiln_tensor_dtype(back, &dtype));
    assert_int_equal(dtype, map[i].dtype);
    int64_t got_shape[2];
    assert_kiln_ok(kiln_tensor_shape(back, got_shape, 2));
    assert_int_equal(got_shape[0], 3);
    assert_int_equal(got_shape[1], 2);
    kiln_tensor *filled = NULL;
    assert_kiln_ok(kiln_tensor_full(ctx, shape, 2, map[i].dtype, cpu, 7, &filled));
    unsigned char bytes[6 * 8];
    int64_t nbytes = 6 * kiln_dtype_size(map[i].dtype);
    assert_kiln_ok(kiln_tensor_copy_to_host(filled, bytes, nbytes));
    assert_kiln_ok(kiln_tensor_copy_from_host(back, bytes, nbytes));
    double want[6] = {7, 7, 7, 7, 7, 7};
    assert_tensor_close(t, want, 6, 0, 0); /* written through the import, read through the source */
    assert_memory_equal(exported, bytes, (size_t)nbytes);
    kiln_tensor_release(filled);
    kiln_tensor_release(t);
    kiln_tensor_release(back); /* calls kiln's own export deleter */
  }
}

/* ---- import ------------------------------------------------------------------ */

static void import_shares_and_deletes_once(void **state) {
  if (kiln_test_cuda_run()) skip(); /* the CPU cases run in test_dlpack */
  kiln_context *ctx = *state;
  atomic_int deleted = 0;
  producer *p = make_producer(6, &deleted);
  float *buffer = p->buffer;
  kiln_tensor *t = NULL, *view = NULL, *sum = NULL;
  assert_kiln_ok(kiln_tensor_from_dlpack(ctx, &p->managed, &t));
  double want[6] = {0, 1, 2, 3, 4, 5};
  assert_tensor_close(t, want, 6, 0, 0);
  /* kiln's math runs on it. */
  assert_kiln_ok(kiln_tensor_reduce(KILN_SUM, t, 0, 0, &sum));
  double total = 0;
  assert_kiln_ok(kiln_tensor_item(sum, &total));
  assert_true(total == 15);
  /* Writes through kiln show in the producer's buffer. */
  const float values[6] = {10, 11, 12, 13, 14, 15};
  assert_kiln_ok(kiln_tensor_copy_from_host(t, values, sizeof values));
  assert_true(buffer[0] == 10 && buffer[5] == 15);
  buffer[1] = 100;
  want[0] = 100;
  const int64_t shape[2] = {2, 3};
  assert_kiln_ok(kiln_tensor_reshape(t, shape, 2, &view));
  kiln_tensor *row = NULL;
  assert_kiln_ok(kiln_tensor_rows(view, 0, 1, &row));
  double row_want[3] = {10, 100, 12};
  assert_tensor_close(row, row_want, 3, 0, 0);
  /* The deleter waits for the last view. */
  kiln_tensor_release(t);
  kiln_tensor_release(view);
  assert_int_equal(atomic_load(&deleted), 0);
  kiln_tensor_release(row);
  assert_int_equal(atomic_load(&deleted), 1);
  kiln_tensor_release(sum);
  assert_int_equal(atomic_load(&deleted), 1);
}

static void *release_tensor(void *arg) {
  kiln_tensor_release(arg);
  return NULL;
}

static void *call_deleter(void *arg) {
  DLManagedTensorVersioned *m = arg;
  m->deleter(m);
  return NULL;
}

static void deleters_on_other_threads(void **state) {
  if (kiln_test_cuda_run()) skip(); /* the CPU cases run in test_dlpack */
  kiln_context *ctx = *state;
  /* An import released on another thread calls the producer's deleter once. */
  atomic_int deleted = 0;
  producer *p = make_producer(1000, &deleted);
  kiln_tensor *t = NULL;
  assert_kiln_ok(kiln_tensor_from_dlpack(ctx, &p->managed, &t));
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, release_tensor, t), 0);
  assert_int_equal(pthread_join(thread, NULL), 0);
  assert_int_equal(atomic_load(&deleted), 1);

  /* Exports deleted on other threads while this one releases the tensor. */
  enum { N = 8 };
  kiln_tensor *src = NULL;
  const int64_t shape[1] = {4096};
  assert_kiln_ok(kiln_tensor_ones(ctx, shape, 1, KILN_F64, cpu, &src));
  DLManagedTensorVersioned *ms[N];
  for (int i = 0; i < N; ++i) assert_kiln_ok(kiln_tensor_to_dlpack(src, 0, &ms[i]));
  pthread_t threads[N];
  for (int i = 0; i < N; ++i) assert_int_equal(pthread_create(&threads[i], NULL, call_deleter, ms[i]), 0);
  kiln_tensor_release(src);
  for (int i = 0; i < N; ++i) assert_int_equal(pthread_join(threads[i], NULL), 0);
}

static void import_offsets_and_strides(void **state) {
  if (kiln_test_cuda_run()) skip(); /* the CPU cases run in test_dlpack */
  kiln_context *ctx = *state;
  atomic_int deleted = 0;
  kiln_tensor *t = NULL;

  /* byte_offset: the tensor starts 2 floats into the buffer. */
  producer *p = make_producer(10, &deleted);
  p->shape[0] = 4;
  p->managed.dl_tensor.byte_offset = 2 * sizeof(float);
  assert_kiln_ok(kiln_tensor_from_dlpack(ctx, &p->managed, &t));
  double want[4] = {2, 3, 4, 5};
  assert_tensor_close(t, want, 4, 0, 0);
  kiln_tensor_release(t);
  assert_int_equal(atomic_load(&deleted), 1);

  /* Explicit contiguous strides, and any stride on a dimension of size 1. */
  p = make_producer(6, &deleted);
  p->managed.dl_tensor.ndim = 3;
  p->shape[0] = 2, p->shape[1] = 1, p->shape[2] = 3;
  p->strides[0] = 3, p->strides[1] = 12345, p->strides[2] = 1;
  p->managed.dl_tensor.strides = p->strides;
  assert_kiln_ok(kiln_tensor_from_dlpack(ctx, &p->managed, &t));
  kiln_tensor_release(t);
  assert_int_equal(atomic_load(&deleted), 2);

  /* A transposed (column-major) layout is refused and the caller keeps it. */
  p = make_producer(6, &deleted);
  p->managed.dl_tensor.ndim = 2;
  p->shape[0] = 2, p->shape[1] = 3;
  p->strides[0] = 1, p->strides[1] = 2;
  p->managed.dl_tensor.strides = p->strides;
  t = (kiln_tensor *)(uintptr_t)1;
  assert_status(kiln_tensor_from_dlpack(ctx, &p->managed, &t), KILN_ERROR_NOT_SUPPORTED);
  assert_null(t);
  assert_last_error_contains("contiguous");
  assert_int_equal(atomic_load(&deleted), 2);
  p->managed.deleter(&p->managed);
  assert_int_equal(atomic_load(&deleted), 3);

  /* No elements: NULL data is fine and the deleter still runs once. */
  p = make_producer(0, &deleted);
  p->managed.dl_tensor.data = NULL;
  assert_kiln_ok(kiln_tensor_from_dlpack(ctx, &p->managed, &t));
  int64_t n = -1;
  assert_kiln_ok(kiln_tensor_numel(t, &n));
  assert_int_equal(n, 0);
  kiln_tensor_release(t);
  assert_int_equal(atomic_load(&deleted), 4);

  /* A NULL deleter: nothing to call. */
  float scalar = 42;
  DLManagedTensorVersioned bare = {{DLPACK_MAJOR_VERSION, 0}, NULL, NULL, 0,
                                   {&scalar, {kDLCPU, 0}, 0, {kDLFloat, 32, 1}, NULL, NULL, 0}};
  assert_kiln_ok(kiln_tensor_from_dlpack(ctx, &bare, &t));
  double item = 0;
  assert_kiln_ok(kiln_tensor_item(t, &item));
  assert_true(item == 42);
  kiln_tensor_release(t);

  /* kDLCUDAHost is pinned host memory. */
  p = make_producer(3, &deleted);
  p->managed.dl_tensor.device.device_type = kDLCUDAHost;
  assert_kiln_ok(kiln_tensor_from_dlpack(ctx, &p->managed, &t));
  int pinned = 0;
  kiln_device dev;
  assert_kiln_ok(kiln_tensor_is_pinned(t, &pinned));
  assert_kiln_ok(kiln_tensor_device(t, &dev));
  assert_int_equal(pinned, 1);
  assert_int_equal(dev.kind, KILN_DEVICE_CPU);
  kiln_tensor_release(t);
  assert_int_equal(atomic_load(&deleted), 5);
}

/* Each case: a refusal with `status` (and `needle` in the message); the
 * deleter is not called; the producer is freed by the test afterwards. */
static void expect_refused(kiln_context *ctx, producer *p, kiln_status status, const char *needle,
                           atomic_int *deleted) {
  int before = atomic_load(deleted);
  kiln_tensor *t = (kiln_tensor *)(uintptr_t)1;
  assert_status(kiln_tensor_from_dlpack(ctx, &p->managed, &t), status);
  assert_null(t);
  if (needle) assert_last_error_contains(needle);
  assert_int_equal(atomic_load(deleted), before);
  p->managed.deleter(&p->managed);
  assert_int_equal(atomic_load(deleted), before + 1);
}

static void import_refusals(void **state) {
  if (kiln_test_cuda_run()) skip(); /* the CPU cases run in test_dlpack */
  kiln_context *ctx = *state;
  atomic_int deleted = 0;
  producer *p;

  p = make_producer(4, &deleted);
  p->managed.version.major = 2;
  p->managed.version.minor = 3;
  expect_refused(ctx, p, KILN_ERROR_NOT_SUPPORTED, "version 2.3 but kiln speaks DLPack 1.0", &deleted);
  p = make_producer(4, &deleted);
  p->managed.version.major = 0;
  expect_refused(ctx, p, KILN_ERROR_NOT_SUPPORTED, "version 0.", &deleted);
  /* A newer minor version is fine. */
  p = make_producer(4, &deleted);
  p->managed.version.minor = 7;
  kiln_tensor *t = NULL;
  assert_kiln_ok(kiln_tensor_from_dlpack(ctx, &p->managed, &t));
  kiln_tensor_release(t);

  const DLDataType bad_dtypes[] = {{kDLBool, 8, 1}, {kDLInt, 8, 1},   {kDLInt, 16, 1},   {kDLUInt, 16, 1},
                                   {kDLFloat, 32, 4}, {kDLComplex, 64, 1}, {kDLBfloat, 32, 1}, {kDLOpaqueHandle, 64, 1}};
  for (size_t i = 0; i < sizeof bad_dtypes / sizeof bad_dtypes[0]; ++i) {
    p = make_producer(4, &deleted);
    p->managed.dl_tensor.dtype = bad_dtypes[i];
    expect_refused(ctx, p, KILN_ERROR_NOT_SUPPORTED, "has no kiln dtype", &deleted);
  }

  p = make_producer(4, &deleted);
  p->managed.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  expect_refused(ctx, p, KILN_ERROR_NOT_SUPPORTED, "read-only", &deleted);

  p = make_producer(4, &deleted);
  p->managed.dl_tensor.device.device_type = kDLROCM;
  expect_refused(ctx, p, KILN_ERROR_NOT_SUPPORTED, "kDLROCM", &deleted);
  p = make_producer(4, &deleted);
  p->managed.dl_tensor.device.device_type = kDLCUDAManaged;
  expect_refused(ctx, p, KILN_ERROR_NOT_SUPPORTED, "managed", &deleted);
  /* A CUDA device this context cannot use. */
  p = make_producer(4, &deleted);
  p->managed.dl_tensor.device.device_type = kDLCUDA;
  p->managed.dl_tensor.device.device_id = 63;
  expect_refused(ctx, p, KILN_ERROR_DEVICE_UNAVAILABLE, NULL, &deleted);
  p = make_producer(4, &deleted);
  p->managed.dl_tensor.device.device_type = kDLCUDA;
  p->managed.dl_tensor.device.device_id = -1;
  expect_refused(ctx, p, KILN_ERROR_DEVICE_UNAVAILABLE, NULL, &deleted);

  p = make_producer(4, &deleted);
  p->managed.dl_tensor.ndim = KILN_MAX_DIMS + 1;
  for (int i = 0; i < KILN_MAX_DIMS + 1; ++i) p->shape[i] = 1;
  expect_refused(ctx, p, KILN_ERROR_NOT_SUPPORTED, "dimensions", &deleted);
  p = make_producer(4, &deleted);
  p->managed.dl_tensor.ndim = -1;
  expect_refused(ctx, p, KILN_ERROR_INVALID_ARGUMENT, NULL, &deleted);
  p = make_producer(4, &deleted);
  p->shape[0] = -4;
  expect_refused(ctx, p, KILN_ERROR_INVALID_ARGUMENT, "size -4", &deleted);
  p = make_producer(4, &deleted);
  p->managed.dl_tensor.shape = NULL;
  expect_refused(ctx, p, KILN_ERROR_INVALID_ARGUMENT, "NULL shape", &deleted);
  p = make_producer(4, &deleted);
  p->managed.dl_tensor.data = NULL;
  expect_refused(ctx, p, KILN_ERROR_INVALID_ARGUMENT, "NULL data", &deleted);
  /* A size whose byte count overflows. */
  p = make_producer(4, &deleted);
  p->managed.dl_tensor.ndim = 2;
  p->shape[0] = INT64_C(1) << 40;
  p->shape[1] = INT64_C(1) << 40;
  expect_refused(ctx, p, KILN_ERROR_INVALID_ARGUMENT, NULL, &deleted);

  /* Offsets that put the tensor, or only its end, past the address space. */
  p = make_producer(4, &deleted);
  p->managed.dl_tensor.byte_offset = UINT64_MAX - (uint64_t)(uintptr_t)p->managed.dl_tensor.data + 1;
  expect_refused(ctx, p, KILN_ERROR_INVALID_ARGUMENT, "address space", &deleted);
  p = make_producer(4, &deleted);
  p->managed.dl_tensor.byte_offset = UINT64_MAX - (uint64_t)(uintptr_t)p->managed.dl_tensor.data - 7;
  expect_refused(ctx, p, KILN_ERROR_INVALID_ARGUMENT, "address space", &deleted); /* 16 bytes from the last 8 */

  /* NULL arguments and a released context. */
  p = make_producer(4, &deleted);
  t = (kiln_tensor *)(uintptr_t)1;
  assert_status(kiln_tensor_from_dlpack(NULL, &p->managed, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(t);
  assert_status(kiln_tensor_from_dlpack(ctx, NULL, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_from_dlpack(ctx, &p->managed, NULL), KILN_ERROR_INVALID_ARGUMENT);
  kiln_context *dead = kiln_test_context_create(0);
  kiln_context_release(dead);
  assert_status(kiln_tensor_from_dlpack(dead, &p->managed, &t), KILN_ERROR_INVALID_HANDLE);
  /* 15 refusals and 8 bad dtypes freed by the test, 1 import released. */
  assert_int_equal(atomic_load(&deleted), 15 + 8 + 1);
  p->managed.deleter(&p->managed);
}

/* An imported tensor outlives its context handle: the storage keeps the
 * context alive, and the deleter still runs once. */
static void import_outlives_context(void **state) {
  if (kiln_test_cuda_run()) skip(); /* the CPU cases run in test_dlpack */
  (void)state;
  atomic_int deleted = 0;
  kiln_context *ctx = kiln_test_context_create(0);
  producer *p = make_producer(3, &deleted);
  kiln_tensor *t = NULL;
  assert_kiln_ok(kiln_tensor_from_dlpack(ctx, &p->managed, &t));
  kiln_context_release(ctx);
  double want[3] = {0, 1, 2};
  assert_tensor_close(t, want, 3, 0, 0);
  kiln_tensor_release(t);
  assert_int_equal(atomic_load(&deleted), 1);
}

/* The GPU half (test_dlpack_cuda, skipped without a usable CUDA device):
 * CUDA and pinned tensors out and back in, sharing memory. */
static void cuda_round_trip(void **state) {
  kiln_context *ctx = *state;
  kiln_device dev;
  if (!kiln_test_gpu_cases(ctx, &dev)) skip();
  const float values[4] = {1, 2, 3, 4};
  const int64_t shape[1] = {4};
  kiln_tensor *t = kiln_test_tensor_f32(ctx, values, shape, 1, dev), *back = NULL;
  DLManagedTensorVersioned *m = NULL;
  assert_kiln_ok(kiln_tensor_to_dlpack(t, 0, &m));
  assert_int_equal(m->dl_tensor.device.device_type, kDLCUDA);
  assert_int_equal(m->dl_tensor.device.device_id, dev.index);
  assert_kiln_ok(kiln_tensor_from_dlpack(ctx, m, &back));
  kiln_device got;
  assert_kiln_ok(kiln_tensor_device(back, &got));
  assert_int_equal(got.kind, KILN_DEVICE_CUDA);
  assert_int_equal(got.index, dev.index);
  const float other[4] = {5, 6, 7, 8};
  assert_kiln_ok(kiln_tensor_copy_from_host(back, other, sizeof other));
  double want[4] = {5, 6, 7, 8};
  assert_tensor_close(t, want, 4, 0, 0);
  kiln_tensor_release(t);
  assert_tensor_close(back, want, 4, 0, 0); /* the import keeps the export, which keeps the memory */
  kiln_tensor_release(back);

  /* Pinned host memory goes out as kDLCUDAHost and comes back pinned. */
  kiln_tensor *pinned = NULL;
  assert_kiln_ok(kiln_tensor_empty_pinned(ctx, shape, 1, KILN_F32, &pinned));
  assert_kiln_ok(kiln_tensor_to_dlpack(pinned, 0, &m));
  assert_int_equal(m->dl_tensor.device.device_type, kDLCUDAHost);
  assert_kiln_ok(kiln_tensor_from_dlpack(ctx, m, &back));
  int is_pinned = 0;
  assert_kiln_ok(kiln_tensor_is_pinned(back, &is_pinned));
  assert_int_equal(is_pinned, 1);
  kiln_tensor_release(back);
  kiln_tensor_release(pinned);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(export_describes_the_tensor),
      cmocka_unit_test(export_views_and_flags),
      cmocka_unit_test(dtypes_round_trip),
      cmocka_unit_test(import_shares_and_deletes_once),
      cmocka_unit_test(deleters_on_other_threads),
      cmocka_unit_test(import_offsets_and_strides),
      cmocka_unit_test(import_refusals),
      cmocka_unit_test(import_outlives_context),
      cmocka_unit_test(cuda_round_trip),
  };
  return cmocka_run_group_tests(tests, kiln_test_context_setup, kiln_test_context_teardown);
}
