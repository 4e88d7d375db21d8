/* Tensor creation, queries, host copies, device moves, casts, clones and
 * random tensors, through the public API, on success and on every error path. */
#include "support.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};

/* A non-NULL pointer no kiln call returns, to see out-parameters cleared. */
#define SENTINEL ((kiln_tensor *)(uintptr_t)0x1)

static const kiln_dtype ALL_DTYPES[] = {KILN_F32, KILN_F16, KILN_BF16, KILN_F64, KILN_I32, KILN_I64, KILN_U8};
#define N_DTYPES ((int)(sizeof ALL_DTYPES / sizeof ALL_DTYPES[0]))

static int64_t numel_of(const kiln_tensor *t) {
  int64_t n = -1;
  assert_kiln_ok(kiln_tensor_numel(t, &n));
  return n;
}

/* ---- dtypes ------------------------------------------------------------- */

static void test_dtype_names_and_sizes(void **state) {
  (void)state;
  static const char *names[] = {"f32", "f16", "bf16", "f64", "i32", "i64", "u8"};
  static const int64_t sizes[] = {4, 2, 2, 8, 4, 8, 1};
  for (int d = 0; d < N_DTYPES; ++d) {
    assert_string_equal(kiln_dtype_name((kiln_dtype)d), names[d]);
    assert_int_equal(kiln_dtype_size((kiln_dtype)d), sizes[d]);
  }
  assert_null(kiln_dtype_name((kiln_dtype)99));
  assert_null(kiln_dtype_name((kiln_dtype)-1));
  assert_int_equal(kiln_dtype_size((kiln_dtype)99), 0);
  assert_int_equal(kiln_dtype_size((kiln_dtype)-1), 0);
}

/* ---- creation ----------------------------------------------------------- */

/* zeros, ones and full give the value everywhere, for every dtype and device. */
static void test_fill_creators(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  const int64_t shape[] = {3, 5, 2};
  double want[30];
  for (int dv = 0; dv < ndev; ++dv) {
    for (int d = 0; d < N_DTYPES; ++d) {
      kiln_dtype dtype = ALL_DTYPES[d];
      kiln_tensor *t = NULL;
      /* 3.0 and -2.5 are exact in every float dtype; integers get 7. */
      double fill = (dtype == KILN_I32 || dtype == KILN_I64 || dtype == KILN_U8) ? 7.0 : -2.5;

      assert_kiln_ok(kiln_tensor_zeros(ctx, shape, 3, dtype, devs[dv], &t));
      for (int i = 0; i < 30; ++i) want[i] = 0.0;
      assert_tensor_close(t, want, 30, 0.0, 0.0);
      kiln_tensor_release(t);

      assert_kiln_ok(kiln_tensor_ones(ctx, shape, 3, dtype, devs[dv], &t));
      for (int i = 0; i < 30; ++i) want[i] = 1.0;
      assert_tensor_close(t, want, 30, 0.0, 0.0);
      kiln_tensor_release(t);

      assert_kiln_ok(kiln_tensor_full(ctx, shape, 3, dtype, devs[dv], fill, &t));
      for (int i = 0; i < 30; ++i) want[i] = fill;
      assert_tensor_close(t, want, 30, 0.0, 0.0);
      kiln_dtype got_dtype = (kiln_dtype)-1;
      assert_kiln_ok(kiln_tensor_dtype(t, &got_dtype));
      assert_int_equal(got_dtype, dtype);
      kiln_device got_dev = {KILN_DEVICE_CPU, 99};
      assert_kiln_ok(kiln_tensor_device(t, &got_dev));
      assert_int_equal(got_dev.kind, devs[dv].kind);
      assert_int_equal(got_dev.index, devs[dv].index);
      kiln_tensor_release(t);

      assert_kiln_ok(kiln_tensor_empty(ctx, shape, 3, dtype, devs[dv], &t));
      assert_int_equal(numel_of(t), 30);
      kiln_tensor_release(t);
    }
  }
}

static void test_full_rejects_values_outside_integer_dtypes(void **state) {
  kiln_context *ctx = *state;
  const int64_t shape[] = {2};
  kiln_tensor *t = SENTINEL;
  assert_status(kiln_tensor_full(ctx, shape, 1, KILN_U8, cpu, 256.0, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(t);
  assert_last_error_contains("u8");
  assert_status(kiln_tensor_full(ctx, shape, 1, KILN_U8, cpu, -1.0, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_full(ctx, shape, 1, KILN_I32, cpu, 3e9, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_full(ctx, shape, 1, KILN_I64, cpu, NAN, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_full(ctx, shape, 1, KILN_I64, cpu, 9.3e18, &t), KILN_ERROR_INVALID_ARGUMENT);
  /* Fractions truncate toward zero, as a cast does. */
  assert_kiln_ok(kiln_tensor_full(ctx, shape, 1, KILN_I32, cpu, -2.75, &t));
  const double want[] = {-2.0, -2.0};
  assert_tensor_close(t, want, 2, 0.0, 0.0);
  kiln_tensor_release(t);
  /* Floats take anything, infinities and NaN included. */
  assert_kiln_ok(kiln_tensor_full(ctx, shape, 1, KILN_F32, cpu, INFINITY, &t));
  const double inf[] = {INFINITY, INFINITY};
  assert_tensor_close(t, inf, 2, 0.0, 0.0);
  kiln_tensor_release(t);
}

static void test_creation_errors(void **state) {
  kiln_context *ctx = *state;
  const int64_t shape[] = {2, 3};
  kiln_tensor *t = SENTINEL;

  assert_status(kiln_tensor_empty(NULL, shape, 2, KILN_F32, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(t);
  assert_status(kiln_tensor_empty(ctx, shape, 2, KILN_F32, cpu, NULL), KILN_ERROR_INVALID_ARGUMENT);
  t = SENTINEL;
  assert_status(kiln_tensor_zeros(ctx, NULL, 2, KILN_F32, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(t);
  const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  assert_status(kiln_tensor_empty(ctx, nine, 9, KILN_F32, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("9");
  assert_status(kiln_tensor_empty(ctx, shape, -1, KILN_F32, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  const int64_t negative[] = {2, -3};
  assert_status(kiln_tensor_ones(ctx, negative, 2, KILN_F32, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("[2, -3]");
  assert_status(kiln_tensor_empty(ctx, shape, 2, (kiln_dtype)99, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("99");
  assert_status(kiln_tensor_empty(ctx, shape, 2, (kiln_dtype)-1, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  const kiln_device bad_kind = {(kiln_device_kind)7, 0};
  assert_status(kiln_tensor_empty(ctx, shape, 2, KILN_F32, bad_kind, &t), KILN_ERROR_INVALID_ARGUMENT);
  const kiln_device bad_cpu = {KILN_DEVICE_CPU, 3};
  assert_status(kiln_tensor_empty(ctx, shape, 2, KILN_F32, bad_cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  const kiln_device negative_cuda = {KILN_DEVICE_CUDA, -2};
  assert_status(kiln_tensor_empty(ctx, shape, 2, KILN_F32, negative_cuda, &t), KILN_ERROR_INVALID_ARGUMENT);
  const kiln_device missing_cuda = {KILN_DEVICE_CUDA, 99};
  assert_status(kiln_tensor_empty(ctx, shape, 2, KILN_F32, missing_cuda, &t), KILN_ERROR_DEVICE_UNAVAILABLE);
  assert_last_error_contains("cuda:99");
  assert_null(t);

  /* Element and byte counts past int64 are rejected before any allocation. */
  const int64_t huge[] = {INT64_C(1) << 40, INT64_C(1) << 40};
  assert_status(kiln_tensor_empty(ctx, huge, 2, KILN_U8, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  const int64_t huge_with_zero[] = {INT64_C(1) << 40, 0, INT64_C(1) << 40};
  assert_status(kiln_tensor_empty(ctx, huge_with_zero, 3, KILN_U8, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  const int64_t bytes_overflow[] = {INT64_C(1) << 61};
  assert_status(kiln_tensor_empty(ctx, bytes_overflow, 1, KILN_F64, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(t);
}

/* A representable but impossible size fails with OUT_OF_MEMORY, and the
 * context goes on working. */
static void test_out_of_memory_then_recover(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  const int64_t huge[] = {INT64_C(1) << 57}; /* 2^60 bytes of f64 */
  const int64_t small[] = {4};
  for (int dv = 0; dv < ndev; ++dv) {
    kiln_tensor *t = SENTINEL;
    assert_status(kiln_tensor_zeros(ctx, huge, 1, KILN_F64, devs[dv], &t), KILN_ERROR_OUT_OF_MEMORY);
    assert_null(t);
    assert_kiln_ok(kiln_tensor_full(ctx, small, 1, KILN_F64, devs[dv], 1.5, &t));
    const double want[] = {1.5, 1.5, 1.5, 1.5};
    assert_tensor_close(t, want, 4, 0.0, 0.0);
    kiln_tensor_release(t);
  }
  kiln_tensor *pinned = SENTINEL;
  assert_status(kiln_tensor_empty_pinned(ctx, huge, 1, KILN_F64, &pinned), KILN_ERROR_OUT_OF_MEMORY);
  assert_null(pinned);
}

static void test_arange(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  for (int dv = 0; dv < ndev; ++dv) {
    kiln_tensor *t = NULL;
    double want[16];

    assert_kiln_ok(kiln_tensor_arange(ctx, 0.0, 5.0, 1.0, KILN_I64, devs[dv], &t));
    for (int i = 0; i < 5; ++i) want[i] = i;
    assert_tensor_close(t, want, 5, 0.0, 0.0);
    kiln_tensor_release(t);

    /* ceil((1 - 0.25) / 0.125) = 6 values; the last one is below end. */
    assert_kiln_ok(kiln_tensor_arange(ctx, 0.25, 1.0, 0.125, KILN_F64, devs[dv], &t));
    for (int i = 0; i < 6; ++i) want[i] = 0.25 + 0.125 * i;
    assert_tensor_close(t, want, 6, 0.0, 0.0);
    kiln_tensor_release(t);

    assert_kiln_ok(kiln_tensor_arange(ctx, 3.0, -3.0, -1.5, KILN_F32, devs[dv], &t));
    for (int i = 0; i < 4; ++i) want[i] = 3.0 - 1.5 * i;
    assert_tensor_close(t, want, 4, 0.0, 0.0);
    kiln_tensor_release(t);

    /* An empty range: no elements, not an error. */
    assert_kiln_ok(kiln_tensor_arange(ctx, 2.0, 2.0, 1.0, KILN_I32, devs[dv], &t));
    assert_int_equal(numel_of(t), 0);
    kiln_tensor_release(t);
    assert_kiln_ok(kiln_tensor_arange(ctx, 5.0, 0.0, 1.0, KILN_F32, devs[dv], &t));
    assert_int_equal(numel_of(t), 0);
    kiln_tensor_release(t);
  }
  kiln_tensor *t = SENTINEL;
  assert_status(kiln_tensor_arange(ctx, 0.0, 1.0, 0.0, KILN_F32, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(t);
  assert_status(kiln_tensor_arange(ctx, 0.0, NAN, 1.0, KILN_F32, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_arange(ctx, 0.0, INFINITY, 1.0, KILN_F32, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_arange(ctx, 0.0, 1e300, 1e-300, KILN_F64, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("arange(0, 1e+300, 1e-300) would have more than 2^53 elements");
  assert_status(kiln_tensor_arange(ctx, 250.0, 260.0, 1.0, KILN_U8, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_arange(ctx, 0.0, 1.0, 1.0, (kiln_dtype)99, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_arange(NULL, 0.0, 1.0, 1.0, KILN_F32, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(t);
}

/* ---- host copies -------------------------------------------------------- */

static void test_from_host_round_trip_every_dtype(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  unsigned char src[6 * 8], back[6 * 8];
  for (int i = 0; i < (int)sizeof src; ++i) src[i] = (unsigned char)(i * 37 + 11);
  const int64_t shape[] = {2, 3};
  for (int dv = 0; dv < ndev; ++dv) {
    for (int d = 0; d < N_DTYPES; ++d) {
      int64_t nbytes = 6 * kiln_dtype_size(ALL_DTYPES[d]);
      kiln_tensor *t = NULL;
      assert_kiln_ok(kiln_tensor_from_host(ctx, src, nbytes, shape, 2, ALL_DTYPES[d], devs[dv], &t));
      memset(back, 0, sizeof back);
      assert_kiln_ok(kiln_tensor_copy_to_host(t, back, nbytes));
      assert_memory_equal(back, src, (size_t)nbytes);
      /* copy_from_host overwrites in place. */
      unsigned char other[6 * 8];
      for (int i = 0; i < (int)nbytes; ++i) other[i] = (unsigned char)(255 - src[i]);
      assert_kiln_ok(kiln_tensor_copy_from_host(t, other, nbytes));
      assert_kiln_ok(kiln_tensor_copy_to_host(t, back, nbytes));
      assert_memory_equal(back, other, (size_t)nbytes);
      kiln_tensor_release(t);
    }
  }
}

static void test_host_copy_errors(void **state) {
  kiln_context *ctx = *state;
  const int64_t shape[] = {2, 3};
  float data[6] = {0};
  kiln_tensor *t = SENTINEL;
  assert_status(kiln_tensor_from_host(ctx, data, 20, shape, 2, KILN_F32, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(t);
  assert_last_error_contains("24");
  assert_status(kiln_tensor_from_host(ctx, NULL, 24, shape, 2, KILN_F32, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_from_host(ctx, data, 24, shape, 2, KILN_F32, cpu, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_from_host(ctx, data, 24, shape, 2, (kiln_dtype)99, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);

  assert_kiln_ok(kiln_tensor_from_host(ctx, data, 24, shape, 2, KILN_F32, cpu, &t));
  assert_status(kiln_tensor_copy_to_host(t, data, 23), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("24");
  assert_status(kiln_tensor_copy_to_host(t, data, 48), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_copy_to_host(t, NULL, 24), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_copy_to_host(NULL, data, 24), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_copy_from_host(t, data, 4), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("24");
  assert_status(kiln_tensor_copy_from_host(t, NULL, 24), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_copy_from_host(NULL, data, 24), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(t);
}

static void test_item(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  for (int dv = 0; dv < ndev; ++dv) {
    for (int d = 0; d < N_DTYPES; ++d) {
      kiln_tensor *t = NULL;
      double got = 0.0;
      assert_kiln_ok(kiln_tensor_full(ctx, NULL, 0, ALL_DTYPES[d], devs[dv], 6.0, &t)); /* 0-d */
      assert_kiln_ok(kiln_tensor_item(t, &got));
      assert_true(got == 6.0);
      kiln_tensor_release(t);
      const int64_t one_by_one[] = {1, 1};
      assert_kiln_ok(kiln_tensor_full(ctx, one_by_one, 2, ALL_DTYPES[d], devs[dv], 200.0, &t));
      assert_kiln_ok(kiln_tensor_item(t, &got));
      assert_true(got == 200.0);
      kiln_tensor_release(t);
    }
  }
  /* Exact for i64 values a double holds. */
  int64_t big = -(INT64_C(1) << 52) - 3;
  const int64_t one[] = {1};
  kiln_tensor *t = NULL;
  assert_kiln_ok(kiln_tensor_from_host(ctx, &big, 8, one, 1, KILN_I64, cpu, &t));
  double got = 0.0;
  assert_kiln_ok(kiln_tensor_item(t, &got));
  assert_true(got == (double)big);
  kiln_tensor_release(t);

  const int64_t two[] = {2};
  assert_kiln_ok(kiln_tensor_zeros(ctx, two, 1, KILN_F32, cpu, &t));
  got = 5.0;
  assert_status(kiln_tensor_item(t, &got), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("[2]");
  assert_true(got == 0.0);
  assert_status(kiln_tensor_item(t, NULL), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(t);
  const int64_t empty[] = {0};
  assert_kiln_ok(kiln_tensor_zeros(ctx, empty, 1, KILN_F32, cpu, &t));
  assert_status(kiln_tensor_item(t, &got), KILN_ERROR_SHAPE_MISMATCH);
  kiln_tensor_release(t);
}

/* ---- queries ------------------------------------------------------------ */

static void test_queries(void **state) {
  kiln_context *ctx = *state;
  const int64_t shape[] = {4, 1, 6};
  kiln_tensor *t = NULL;
  assert_kiln_ok(kiln_tensor_zeros(ctx, shape, 3, KILN_I32, cpu, &t));

  int64_t v = -1;
  assert_kiln_ok(kiln_tensor_ndim(t, &v));
  assert_int_equal(v, 3);
  assert_kiln_ok(kiln_tensor_numel(t, &v));
  assert_int_equal(v, 24);
  for (int64_t d = -3; d < 3; ++d) {
    assert_kiln_ok(kiln_tensor_dim(t, d, &v));
    assert_int_equal(v, shape[d < 0 ? d + 3 : d]);
  }
  v = 7;
  assert_status(kiln_tensor_dim(t, 3, &v), KILN_ERROR_INVALID_ARGUMENT);
  assert_int_equal(v, 0);
  assert_last_error_contains("3");
  assert_status(kiln_tensor_dim(t, -4, &v), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_dim(t, 0, NULL), KILN_ERROR_INVALID_ARGUMENT);

  int64_t got[KILN_MAX_DIMS] = {0};
  assert_kiln_ok(kiln_tensor_shape(t, got, 3));
  assert_memory_equal(got, shape, sizeof shape);
  assert_kiln_ok(kiln_tensor_shape(t, got, KILN_MAX_DIMS));
  assert_memory_equal(got, shape, sizeof shape);
  got[0] = got[1] = got[2] = 7;
  assert_status(kiln_tensor_shape(t, got, 2), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("capacity 2");
  /* The failed call's out-parameter is zeroed as far as its capacity. */
  assert_int_equal(got[0], 0);
  assert_int_equal(got[1], 0);
  assert_int_equal(got[2], 7);
  assert_status(kiln_tensor_shape(t, NULL, 3), KILN_ERROR_INVALID_ARGUMENT);

  kiln_dtype dtype = KILN_F32;
  assert_kiln_ok(kiln_tensor_dtype(t, &dtype));
  assert_int_equal(dtype, KILN_I32);
  assert_status(kiln_tensor_dtype(t, NULL), KILN_ERROR_INVALID_ARGUMENT);
  kiln_device dev = {KILN_DEVICE_CUDA, 5};
  assert_kiln_ok(kiln_tensor_device(t, &dev));
  assert_int_equal(dev.kind, KILN_DEVICE_CPU);
  assert_int_equal(dev.index, -1);
  assert_kiln_ok(kiln_tensor_get_device(t, &v));
  assert_int_equal(v, -1);
  int pinned = 1;
  assert_kiln_ok(kiln_tensor_is_pinned(t, &pinned));
  assert_int_equal(pinned, 0);
  assert_status(kiln_tensor_is_pinned(t, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_ndim(NULL, &v), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(t);

  /* A 0-d tensor: no dimensions, one element, and nothing for dim to name. */
  assert_kiln_ok(kiln_tensor_zeros(ctx, NULL, 0, KILN_F32, cpu, &t));
  assert_kiln_ok(kiln_tensor_ndim(t, &v));
  assert_int_equal(v, 0);
  assert_kiln_ok(kiln_tensor_numel(t, &v));
  assert_int_equal(v, 1);
  assert_kiln_ok(kiln_tensor_shape(t, NULL, 0));
  assert_status(kiln_tensor_dim(t, 0, &v), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(t);
}

/* ---- handles ------------------------------------------------------------ */

static void test_released_and_foreign_handles(void **state) {
  kiln_context *ctx = *state;
  const int64_t shape[] = {2};
  kiln_tensor *t = NULL;
  assert_kiln_ok(kiln_tensor_zeros(ctx, shape, 1, KILN_F32, cpu, &t));
  kiln_tensor_release(t);
  int64_t v = 3;
  float buf[2];
  kiln_tensor *out = SENTINEL;
  assert_status(kiln_tensor_numel(t, &v), KILN_ERROR_INVALID_HANDLE);
  assert_int_equal(v, 0);
  assert_status(kiln_tensor_copy_to_host(t, buf, 8), KILN_ERROR_INVALID_HANDLE);
  assert_status(kiln_tensor_clone(t, &out), KILN_ERROR_INVALID_HANDLE);
  assert_null(out);
  assert_status(kiln_tensor_binary(KILN_ADD, t, t, &out), KILN_ERROR_INVALID_HANDLE);
  kiln_tensor_release(t); /* a second release is ignored */
  kiln_tensor_release(NULL);

  /* A context pointer is not a tensor, and a tensor is not a context. */
  assert_status(kiln_tensor_numel((const kiln_tensor *)ctx, &v), KILN_ERROR_INVALID_HANDLE);
  assert_kiln_ok(kiln_tensor_zeros(ctx, shape, 1, KILN_F32, cpu, &t));
  assert_status(kiln_tensor_zeros((kiln_context *)t, shape, 1, KILN_F32, cpu, &out), KILN_ERROR_INVALID_HANDLE);
  kiln_tensor_release(t);
}

/* A tensor keeps its context alive after the caller releases the context. */
static void test_tensor_outlives_context_handle(void **state) {
  (void)state;
  kiln_context *ctx = kiln_test_context_create(3);
  const int64_t shape[] = {3};
  kiln_tensor *t = NULL, *u = NULL;
  assert_kiln_ok(kiln_tensor_full(ctx, shape, 1, KILN_F64, cpu, 2.0, &t));
  kiln_context_release(ctx);
  assert_kiln_ok(kiln_tensor_scalar(KILN_MUL, t, 3.0, &u));
  const double want[] = {6.0, 6.0, 6.0};
  assert_tensor_close(u, want, 3, 0.0, 0.0);
  kiln_tensor_release(t);
  kiln_tensor_release(u);
}

/* Several threads read one tensor at once (ops, copies, views) while each
 * releases its own results; every result is right and nothing leaks. */
typedef struct reader_job {
  const kiln_tensor *shared;
  int failures;
} reader_job;

static void *reader(void *arg) {
  reader_job *job = arg;
  for (int iter = 0; iter < 200; ++iter) {
    kiln_tensor *doubled = NULL, *view = NULL;
    double got[64];
    if (kiln_tensor_scalar(KILN_MUL, job->shared, 2.0, &doubled) != KILN_OK ||
        kiln_tensor_rows(doubled, 0, 32, &view) != KILN_OK ||
        kiln_tensor_copy_to_host(view, got, 32 * sizeof(double)) != KILN_OK) {
      ++job->failures;
    } else {
      for (int i = 0; i < 32; ++i) job->failures += got[i] != 2.0 * i;
    }
    kiln_tensor_release(view);
    kiln_tensor_release(doubled);
  }
  return NULL;
}

static void test_concurrent_readers(void **state) {
  kiln_context *ctx = *state;
  kiln_tensor *shared = NULL;
  assert_kiln_ok(kiln_tensor_arange(ctx, 0.0, 64.0, 1.0, KILN_F64, cpu, &shared));
  pthread_t threads[4];
  reader_job jobs[4];
  for (int i = 0; i < 4; ++i) {
    jobs[i].shared = shared;
    jobs[i].failures = 0;
    assert_int_equal(pthread_create(&threads[i], NULL, reader, &jobs[i]), 0);
  }
  for (int i = 0; i < 4; ++i) {
    assert_int_equal(pthread_join(threads[i], NULL), 0);
    assert_int_equal(jobs[i].failures, 0);
  }
  kiln_tensor_release(shared);
}

/* ---- moves, casts, clones ------------------------------------------------ */

static void test_to_same_device_shares_the_tensor(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  for (int dv = 0; dv < ndev; ++dv) {
    const int64_t shape[] = {3};
    kiln_tensor *t = NULL, *same = NULL;
    assert_kiln_ok(kiln_tensor_zeros(ctx, shape, 1, KILN_F32, devs[dv], &t));
    assert_kiln_ok(kiln_tensor_to(t, devs[dv], &same));
    assert_ptr_not_equal(same, t);
    const float values[] = {1.0f, 2.0f, 3.0f};
    assert_kiln_ok(kiln_tensor_copy_from_host(same, values, sizeof values));
    const double want[] = {1.0, 2.0, 3.0};
    assert_tensor_close(t, want, 3, 0.0, 0.0);
    kiln_tensor_release(t);
    assert_tensor_close(same, want, 3, 0.0, 0.0); /* still alive through `same` */
    kiln_tensor_release(same);
  }
}

static void test_to_device_round_trip(void **state) {
  kiln_context *ctx = *state;
  kiln_device gpu;
  if (!kiln_test_gpu_cases(ctx, &gpu)) skip();
  kiln_test_rng rng = kiln_test_rng_make(11);
  double host[257];
  kiln_test_fill_uniform_f64(&rng, host, 257, -100.0, 100.0);
  const int64_t shape[] = {257};
  kiln_tensor *t = kiln_test_tensor_f64(ctx, host, shape, 1, cpu);
  kiln_tensor *on_gpu = NULL, *back = NULL;
  assert_kiln_ok(kiln_tensor_to(t, gpu, &on_gpu));
  int64_t index = -5;
  assert_kiln_ok(kiln_tensor_get_device(on_gpu, &index));
  assert_int_equal(index, gpu.index);
  assert_kiln_ok(kiln_tensor_to(on_gpu, cpu, &back));
  assert_tensor_close(back, host, 257, 0.0, 0.0);
  double direct[257];
  assert_kiln_ok(kiln_tensor_copy_to_host(on_gpu, direct, sizeof direct));
  assert_memory_equal(direct, host, sizeof direct);
  kiln_tensor_release(t);
  kiln_tensor_release(on_gpu);
  kiln_tensor_release(back);

  /* From pinned memory the copy is asynchronous; synchronize, then read. */
  kiln_tensor *pinned = NULL;
  assert_kiln_ok(kiln_tensor_empty_pinned(ctx, shape, 1, KILN_F64, &pinned));
  int is_pinned = 0;
  assert_kiln_ok(kiln_tensor_is_pinned(pinned, &is_pinned));
  assert_int_equal(is_pinned, 1);
  assert_kiln_ok(kiln_tensor_copy_from_host(pinned, host, sizeof host));
  assert_kiln_ok(kiln_tensor_to(pinned, gpu, &on_gpu));
  assert_kiln_ok(kiln_device_synchronize(ctx, gpu));
  assert_tensor_close(on_gpu, host, 257, 0.0, 0.0);
  kiln_tensor_release(pinned);
  kiln_tensor_release(on_gpu);
}

/* Devices parsed from text feed creation directly; a device that is not
 * there is refused when parsed with the context, and again when used. */
static void test_devices_from_strings(void **state) {
  kiln_context *ctx = *state;
  const int64_t shape[] = {2};
  kiln_device dev;
  kiln_tensor *t = NULL;
  assert_kiln_ok(kiln_device_parse(ctx, "cpu", &dev));
  assert_kiln_ok(kiln_tensor_ones(ctx, shape, 1, KILN_F32, dev, &t));
  kiln_tensor_release(t);
  assert_kiln_ok(kiln_device_parse(ctx, "auto", &dev));
  assert_kiln_ok(kiln_tensor_ones(ctx, shape, 1, KILN_F32, dev, &t));
  kiln_tensor_release(t);
  assert_status(kiln_device_parse(ctx, "gpu:0", &dev), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_device_parse(ctx, "cuda:77", &dev), KILN_ERROR_DEVICE_UNAVAILABLE);
  assert_kiln_ok(kiln_device_parse(NULL, "cuda:77", &dev)); /* syntax only */
  t = SENTINEL;
  assert_status(kiln_tensor_ones(ctx, shape, 1, KILN_F32, dev, &t), KILN_ERROR_DEVICE_UNAVAILABLE);
  assert_null(t);
  assert_last_error_contains("cuda:77");
}

static void test_to_errors(void **state) {
  kiln_context *ctx = *state;
  const int64_t shape[] = {2};
  kiln_tensor *t = NULL, *out = SENTINEL;
  assert_kiln_ok(kiln_tensor_zeros(ctx, shape, 1, KILN_F32, cpu, &t));
  const kiln_device missing = {KILN_DEVICE_CUDA, 99};
  assert_status(kiln_tensor_to(t, missing, &out), KILN_ERROR_DEVICE_UNAVAILABLE);
  assert_null(out);
  const kiln_device bad = {(kiln_device_kind)3, 0};
  assert_status(kiln_tensor_to(t, bad, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_to(t, cpu, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_to(NULL, cpu, &out), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(t);
}

static void test_pinned_tensor_is_cpu_memory(void **state) {
  kiln_context *ctx = *state;
  const int64_t shape[] = {2, 2};
  kiln_tensor *t = NULL;
  assert_kiln_ok(kiln_tensor_empty_pinned(ctx, shape, 2, KILN_I32, &t));
  int pinned = 0;
  assert_kiln_ok(kiln_tensor_is_pinned(t, &pinned));
  assert_int_equal(pinned, 1);
  kiln_device dev = {KILN_DEVICE_CUDA, 0};
  assert_kiln_ok(kiln_tensor_device(t, &dev));
  assert_int_equal(dev.kind, KILN_DEVICE_CPU);
  const int32_t values[] = {1, -2, 3, -4};
  assert_kiln_ok(kiln_tensor_copy_from_host(t, values, sizeof values));
  kiln_tensor *abs_t = NULL;
  assert_kiln_ok(kiln_tensor_unary(KILN_ABS, t, 0.0, &abs_t));
  const double want[] = {1, 2, 3, 4};
  assert_tensor_close(abs_t, want, 4, 0.0, 0.0);
  kiln_tensor_release(abs_t);
  kiln_tensor_release(t);
  kiln_tensor *out = SENTINEL;
  assert_status(kiln_tensor_empty_pinned(ctx, shape, 2, (kiln_dtype)42, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(out);
  assert_status(kiln_tensor_empty_pinned(NULL, shape, 2, KILN_F32, &out), KILN_ERROR_INVALID_ARGUMENT);
}

static void test_clone_is_independent(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  for (int dv = 0; dv < ndev; ++dv) {
    const int64_t shape[] = {2, 2};
    const float a[] = {1, 2, 3, 4}, b[] = {9, 9, 9, 9};
    kiln_tensor *t = kiln_test_tensor_f32(ctx, a, shape, 2, devs[dv]);
    kiln_tensor *c = NULL;
    assert_kiln_ok(kiln_tensor_clone(t, &c));
    assert_kiln_ok(kiln_tensor_copy_from_host(t, b, sizeof b));
    const double want[] = {1, 2, 3, 4};
    assert_tensor_close(c, want, 4, 0.0, 0.0);
    kiln_tensor_release(t);
    kiln_tensor_release(c);
  }
}

/* Casts against values computed by hand: exact conversions, truncation
 * toward zero, and rounding to nearest even for the half types. */
static void test_cast(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  const double src[] = {-2.75, -0.5, 0.0, 1.0, 2.5, 100.9, 257.0, 3.0};
  const int64_t shape[] = {8};
  for (int dv = 0; dv < ndev; ++dv) {
    kiln_tensor *t = kiln_test_tensor_f64(ctx, src, shape, 1, devs[dv]);
    kiln_tensor *c = NULL;

    const double to_int[] = {-2, 0, 0, 1, 2, 100, 257, 3};
    assert_kiln_ok(kiln_tensor_cast(t, KILN_I32, &c));
    assert_tensor_close(c, to_int, 8, 0.0, 0.0);
    kiln_tensor_release(c);
    assert_kiln_ok(kiln_tensor_cast(t, KILN_I64, &c));
    assert_tensor_close(c, to_int, 8, 0.0, 0.0);
    kiln_tensor_release(c);

    /* To f32 as C converts a double: to nearest. */
    double to_f32[8];
    for (int i = 0; i < 8; ++i) to_f32[i] = (double)(float)src[i];
    assert_kiln_ok(kiln_tensor_cast(t, KILN_F32, &c));
    assert_tensor_close(c, to_f32, 8, 0.0, 0.0);
    kiln_tensor_release(c);
    /* f16 has 11 significant bits: 100.9 -> 100.875 (nearest). */
    const double to_f16[] = {-2.75, -0.5, 0.0, 1.0, 2.5, 100.875, 257.0, 3.0};
    assert_kiln_ok(kiln_tensor_cast(t, KILN_F16, &c));
    assert_tensor_close(c, to_f16, 8, 0.0, 0.0);
    kiln_tensor_release(c);
    /* bf16 has 8: 100.9 -> 101 (nearest), 257 -> 256 (a tie, to even). */
    const double to_bf16[] = {-2.75, -0.5, 0.0, 1.0, 2.5, 101.0, 256.0, 3.0};
    assert_kiln_ok(kiln_tensor_cast(t, KILN_BF16, &c));
    assert_tensor_close(c, to_bf16, 8, 0.0, 0.0);
    kiln_tensor_release(c);

    /* Casting to the same dtype is a copy, not a view. */
    assert_kiln_ok(kiln_tensor_cast(t, KILN_F64, &c));
    const double zeros[8] = {0};
    assert_kiln_ok(kiln_tensor_copy_from_host(t, zeros, sizeof zeros));
    assert_tensor_close(c, src, 8, 0.0, 0.0);
    kiln_tensor_release(c);
    kiln_tensor_release(t);

    /* Integers to floats and u8. */
    const int32_t ints[] = {-7, 0, 12, 255};
    const int64_t four[] = {4};
    assert_kiln_ok(kiln_tensor_from_host(ctx, ints, sizeof ints, four, 1, KILN_I32, devs[dv], &t));
    assert_kiln_ok(kiln_tensor_cast(t, KILN_F32, &c));
    const double want_f[] = {-7, 0, 12, 255};
    assert_tensor_close(c, want_f, 4, 0.0, 0.0);
    kiln_tensor_release(c);
    kiln_tensor_release(t);
  }
  kiln_tensor *t = NULL, *c = SENTINEL;
  assert_kiln_ok(kiln_tensor_zeros(ctx, shape, 1, KILN_F32, cpu, &t));
  assert_status(kiln_tensor_cast(t, (kiln_dtype)7, &c), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(c);
  assert_status(kiln_tensor_cast(t, KILN_F64, NULL), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(t);
}

/* ---- tensors without elements -------------------------------------------- */

static void test_empty_tensors(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  const int64_t shape[] = {0, 3};
  for (int dv = 0; dv < ndev; ++dv) {
    kiln_tensor *t = NULL, *u = NULL;
    assert_kiln_ok(kiln_tensor_empty(ctx, shape, 2, KILN_F32, devs[dv], &t));
    assert_int_equal(numel_of(t), 0);
    assert_kiln_ok(kiln_tensor_copy_to_host(t, NULL, 0));
    assert_kiln_ok(kiln_tensor_copy_from_host(t, NULL, 0));
    assert_kiln_ok(kiln_tensor_clone(t, &u));
    assert_int_equal(numel_of(u), 0);
    kiln_tensor_release(u);
    assert_kiln_ok(kiln_tensor_to(t, cpu, &u));
    assert_int_equal(numel_of(u), 0);
    kiln_tensor_release(u);
    assert_kiln_ok(kiln_tensor_cast(t, KILN_I64, &u));
    assert_int_equal(numel_of(u), 0);
    kiln_tensor_release(u);
    kiln_tensor_release(t);
    assert_kiln_ok(kiln_tensor_from_host(ctx, NULL, 0, shape, 2, KILN_U8, devs[dv], &t));
    kiln_tensor_release(t);
    assert_kiln_ok(kiln_tensor_rand(ctx, shape, 2, KILN_F32, devs[dv], &t));
    kiln_tensor_release(t);
  }
}

/* ---- random tensors ------------------------------------------------------ */

#define N_RANDOM 100000

static double *read_all(const kiln_tensor *t, int64_t n) {
  double *v = malloc((size_t)n * sizeof(double));
  assert_non_null(v);
  kiln_test_read_f64(t, v, n);
  return v;
}

/* The first values of a fresh context follow core/rng.hpp's counter stream,
 * which is the SplitMix64 sequence of kiln_test_rng from the same seed. */
static void test_rand_matches_the_documented_stream(void **state) {
  (void)state;
  kiln_context *ctx = kiln_test_context_create(1234);
  const int64_t shape[] = {64};
  kiln_tensor *t = NULL;
  assert_kiln_ok(kiln_tensor_rand(ctx, shape, 1, KILN_F64, cpu, &t));
  kiln_test_rng rng = kiln_test_rng_make(1234);
  double want[64];
  for (int i = 0; i < 64; ++i) want[i] = kiln_test_rng_uniform(&rng, 0.0, 1.0);
  assert_tensor_close(t, want, 64, 0.0, 0.0);
  kiln_tensor_release(t);

  /* f32 keeps the top 24 bits of the next draws, so it never rounds up to 1. */
  assert_kiln_ok(kiln_tensor_rand(ctx, shape, 1, KILN_F32, cpu, &t));
  for (int i = 0; i < 64; ++i) want[i] = (double)(kiln_test_rng_next(&rng) >> 40) * ldexp(1.0, -24);
  assert_tensor_close(t, want, 64, 0.0, 0.0);
  kiln_tensor_release(t);

  /* randn: Box-Muller over consecutive pairs, cos then sin. An odd count
   * still uses up its last pair, so the next draw starts after it. */
  const int64_t three[] = {3};
  assert_kiln_ok(kiln_tensor_randn(ctx, three, 1, KILN_F64, cpu, &t));
  double u[4];
  for (int i = 0; i < 4; ++i) u[i] = kiln_test_rng_uniform(&rng, 0.0, 1.0);
  const double two_pi = 6.283185307179586;
  const double normals[] = {sqrt(-2.0 * log(1.0 - u[0])) * cos(two_pi * u[1]),
                            sqrt(-2.0 * log(1.0 - u[0])) * sin(two_pi * u[1]),
                            sqrt(-2.0 * log(1.0 - u[2])) * cos(two_pi * u[3])};
  assert_tensor_close(t, normals, 3, 1e-15, 0.0);
  kiln_tensor_release(t);
  const int64_t one[] = {1};
  assert_kiln_ok(kiln_tensor_rand(ctx, one, 1, KILN_F64, cpu, &t));
  want[0] = kiln_test_rng_uniform(&rng, 0.0, 1.0);
  assert_tensor_close(t, want, 1, 0.0, 0.0);
  kiln_tensor_release(t);
  kiln_context_release(ctx);
}

static void test_rand_statistics(void **state) {
  (void)state;
  static const kiln_dtype floats[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
  kiln_context *ctx = kiln_test_context_create(2024);
  const int64_t shape[] = {N_RANDOM};
  for (int d = 0; d < 4; ++d) {
    kiln_tensor *t = NULL;
    assert_kiln_ok(kiln_tensor_rand(ctx, shape, 1, floats[d], cpu, &t));
    double *v = read_all(t, N_RANDOM);
    double sum = 0.0, sum_sq = 0.0;
    for (int i = 0; i < N_RANDOM; ++i) {
      assert_true(v[i] >= 0.0 && v[i] < 1.0);
      sum += v[i];
      sum_sq += v[i] * v[i];
    }
    double mean = sum / N_RANDOM, var = sum_sq / N_RANDOM - mean * mean;
    /* The mean's standard error is sqrt(1/12/N) ~ 0.0009 and the variance's
     * ~ 0.0003; the bounds are over 10 standard errors, plus the
     * quantisation bias of bf16 (at most 2^-9 on the mean). */
    assert_true(fabs(mean - 0.5) < 0.01 + (floats[d] == KILN_BF16 ? ldexp(1.0, -9) : 0.0));
    assert_true(fabs(var - 1.0 / 12.0) < 0.005);
    free(v);
    kiln_tensor_release(t);

    assert_kiln_ok(kiln_tensor_randn(ctx, shape, 1, floats[d], cpu, &t));
    v = read_all(t, N_RANDOM);
    sum = sum_sq = 0.0;
    for (int i = 0; i < N_RANDOM; ++i) {
      assert_true(isfinite(v[i]));
      sum += v[i];
      sum_sq += v[i] * v[i];
    }
    mean = sum / N_RANDOM;
    var = sum_sq / N_RANDOM - mean * mean;
    /* Standard errors: 0.0032 for the mean, 0.0045 for the variance. */
    assert_true(fabs(mean) < 0.03);
    assert_true(fabs(var - 1.0) < 0.05);
    free(v);
    kiln_tensor_release(t);
  }
  kiln_context_release(ctx);
}

static void test_rand_depends_only_on_the_seed(void **state) {
  (void)state;
  const int64_t shape[] = {10, 100};
  kiln_context *a = kiln_test_context_create(77), *b = kiln_test_context_create(77), *c = kiln_test_context_create(78);
  kiln_device devs[2];
  int ndev = kiln_test_devices(a, devs);
  kiln_tensor *ta = NULL, *tb = NULL, *tc = NULL, *ta2 = NULL;
  assert_kiln_ok(kiln_tensor_randn(a, shape, 2, KILN_F32, cpu, &ta));
  /* The same draw on the other context, on the last device: same values. */
  assert_kiln_ok(kiln_tensor_randn(b, shape, 2, KILN_F32, devs[ndev - 1], &tb));
  assert_kiln_ok(kiln_tensor_randn(c, shape, 2, KILN_F32, cpu, &tc));
  assert_kiln_ok(kiln_tensor_randn(a, shape, 2, KILN_F32, cpu, &ta2));
  double *va = read_all(ta, 1000), *vb = read_all(tb, 1000), *vc = read_all(tc, 1000), *va2 = read_all(ta2, 1000);
  assert_allclose(vb, va, 1000, 0.0, 0.0);
  int same_c = 0, same_next = 0;
  for (int i = 0; i < 1000; ++i) {
    same_c += va[i] == vc[i];
    same_next += va[i] == va2[i];
  }
  assert_true(same_c < 10);
  assert_true(same_next < 10);
  /* Reseeding replays the stream. */
  kiln_tensor *again = NULL;
  assert_kiln_ok(kiln_context_set_seed(a, 77));
  assert_kiln_ok(kiln_tensor_randn(a, shape, 2, KILN_F32, cpu, &again));
  assert_tensor_close(again, va, 1000, 0.0, 0.0);
  free(va);
  free(vb);
  free(vc);
  free(va2);
  kiln_tensor_release(ta);
  kiln_tensor_release(tb);
  kiln_tensor_release(tc);
  kiln_tensor_release(ta2);
  kiln_tensor_release(again);
  kiln_context_release(a);
  kiln_context_release(b);
  kiln_context_release(c);
}

static void test_rand_errors(void **state) {
  kiln_context *ctx = *state;
  const int64_t shape[] = {4};
  kiln_tensor *t = SENTINEL;
  assert_status(kiln_tensor_rand(ctx, shape, 1, KILN_I32, cpu, &t), KILN_ERROR_DTYPE_MISMATCH);
  assert_null(t);
  assert_last_error_contains("i32");
  assert_status(kiln_tensor_randn(ctx, shape, 1, KILN_U8, cpu, &t), KILN_ERROR_DTYPE_MISMATCH);
  assert_status(kiln_tensor_rand(ctx, shape, 1, (kiln_dtype)99, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_randn(NULL, shape, 1, KILN_F32, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  const int64_t negative[] = {-4};
  assert_status(kiln_tensor_randn(ctx, negative, 1, KILN_F32, cpu, &t), KILN_ERROR_INVALID_ARGUMENT);
  const kiln_device missing = {KILN_DEVICE_CUDA, 99};
  assert_status(kiln_tensor_rand(ctx, shape, 1, KILN_F32, missing, &t), KILN_ERROR_DEVICE_UNAVAILABLE);
  assert_null(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dtype_names_and_sizes),
      cmocka_unit_test(test_fill_creators),
      cmocka_unit_test(test_full_rejects_values_outside_integer_dtypes),
      cmocka_unit_test(test_creation_errors),
      cmocka_unit_test(test_out_of_memory_then_recover),
      cmocka_unit_test(test_arange),
      cmocka_unit_test(test_from_host_round_trip_every_dtype),
      cmocka_unit_test(test_host_copy_errors),
      cmocka_unit_test(test_item),
      cmocka_unit_test(test_queries),
      cmocka_unit_test(test_released_and_foreign_handles),
      cmocka_unit_test(test_tensor_outlives_context_handle),
      cmocka_unit_test(test_concurrent_readers),
      cmocka_unit_test(test_to_same_device_shares_the_tensor),
      cmocka_unit_test(test_to_device_round_trip),
      cmocka_unit_test(test_devices_from_strings),
      cmocka_unit_test(test_to_errors),
      cmocka_unit_test(test_pinned_tensor_is_cpu_memory),
      cmocka_unit_test(test_clone_is_independent),
      cmocka_unit_test(test_cast),
      cmocka_unit_test(test_empty_tensors),
      cmocka_unit_test(test_rand_matches_the_documented_stream),
      cmocka_unit_test(test_rand_statistics),
      cmocka_unit_test(test_rand_depends_only_on_the_seed),
      cmocka_unit_test(test_rand_errors),
  };
  return cmocka_run_group_tests(tests, kiln_test_context_setup, kiln_test_context_teardown);
}
