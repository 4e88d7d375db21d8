/* Views: reshape and rows share storage with their source, write through
 * both ways, keep the storage alive, and feed the math like any tensor. */
#include "support.h"

#include <string.h>

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};

#define SENTINEL ((kiln_tensor *)(uintptr_t)0x1)

/* A [rows, cols] f64 tensor holding 0, 1, 2, ... on device. */
static kiln_tensor *counting(kiln_context *ctx, int64_t rows, int64_t cols, kiln_device device) {
  kiln_tensor *t = NULL;
  assert_kiln_ok(kiln_tensor_arange(ctx, 0.0, (double)(rows * cols), 1.0, KILN_F64, device, &t));
  const int64_t shape[] = {rows, cols};
  kiln_tensor *r = NULL;
  assert_kiln_ok(kiln_tensor_reshape(t, shape, 2, &r));
  kiln_tensor_release(t);
  return r;
}

static void expect_shape(const kiln_tensor *t, const int64_t *want, int64_t ndim) {
  int64_t got_ndim = -1, got[KILN_MAX_DIMS];
  assert_kiln_ok(kiln_tensor_ndim(t, &got_ndim));
  assert_int_equal(got_ndim, ndim);
  assert_kiln_ok(kiln_tensor_shape(t, got, KILN_MAX_DIMS));
  for (int64_t i = 0; i < ndim; ++i) assert_int_equal(got[i], want[i]);
}

static void test_reshape_shares_storage(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  for (int dv = 0; dv < ndev; ++dv) {
    kiln_tensor *t = counting(ctx, 4, 6, devs[dv]);
    kiln_tensor *v = NULL;
    const int64_t target[] = {2, -1, 3};
    assert_kiln_ok(kiln_tensor_reshape(t, target, 3, &v));
    const int64_t want_shape[] = {2, 4, 3};
    expect_shape(v, want_shape, 3);
    double want[24];
    for (int i = 0; i < 24; ++i) want[i] = i;
    assert_tensor_close(v, want, 24, 0.0, 0.0);

    /* A write through the view shows in the source, and back. */
    double values[24];
    for (int i = 0; i < 24; ++i) values[i] = -i;
    assert_kiln_ok(kiln_tensor_copy_from_host(v, values, sizeof values));
    assert_tensor_close(t, values, 24, 0.0, 0.0);
    assert_kiln_ok(kiln_tensor_copy_from_host(t, want, sizeof want));
    assert_tensor_close(v, want, 24, 0.0, 0.0);

    /* The view keeps the storage alive after the source is released. */
    kiln_tensor_release(t);
    assert_tensor_close(v, want, 24, 0.0, 0.0);

    /* Flatten, and a one-element tensor to 0-d and back. */
    const int64_t flat[] = {-1};
    kiln_tensor *f = NULL;
    assert_kiln_ok(kiln_tensor_reshape(v, flat, 1, &f));
    const int64_t want_flat[] = {24};
    expect_shape(f, want_flat, 1);
    kiln_tensor_release(f);
    kiln_tensor_release(v);

    kiln_tensor *one = NULL, *scalar = NULL;
    const int64_t one_shape[] = {1, 1, 1};
    assert_kiln_ok(kiln_tensor_full(ctx, one_shape, 3, KILN_F32, devs[dv], 4.0, &one));
    assert_kiln_ok(kiln_tensor_reshape(one, NULL, 0, &scalar));
    expect_shape(scalar, NULL, 0);
    double item = 0.0;
    assert_kiln_ok(kiln_tensor_item(scalar, &item));
    assert_true(item == 4.0);
    kiln_tensor_release(one);
    kiln_tensor_release(scalar);
  }
}

static void test_reshape_errors(void **state) {
  kiln_context *ctx = *state;
  kiln_tensor *t = counting(ctx, 2, 3, cpu), *v = SENTINEL;
  const int64_t two_infer[] = {-1, -1};
  assert_status(kiln_tensor_reshape(t, two_infer, 2, &v), KILN_ERROR_SHAPE_MISMATCH);
  assert_null(v);
  assert_last_error_contains("-1");
  const int64_t wrong[] = {4, 2};
  assert_status(kiln_tensor_reshape(t, wrong, 2, &v), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("[2, 3]");
  assert_last_error_contains("[4, 2]");
  const int64_t indivisible[] = {4, -1};
  assert_status(kiln_tensor_reshape(t, indivisible, 2, &v), KILN_ERROR_SHAPE_MISMATCH);
  const int64_t overflow[] = {INT64_C(1) << 62, 4, -1};
  assert_status(kiln_tensor_reshape(t, overflow, 3, &v), KILN_ERROR_SHAPE_MISMATCH);
  const int64_t minus_two[] = {-2, -3};
  assert_status(kiln_tensor_reshape(t, minus_two, 2, &v), KILN_ERROR_INVALID_ARGUMENT);
  const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 2, 3};
  assert_status(kiln_tensor_reshape(t, nine, 9, &v), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_reshape(t, NULL, 2, &v), KILN_ERROR_INVALID_ARGUMENT);
  const int64_t ok[] = {6};
  assert_status(kiln_tensor_reshape(t, ok, 1, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_reshape(NULL, ok, 1, &v), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(t);

  /* With no elements, a -1 next to a 0 could be anything. */
  const int64_t empty_shape[] = {0, 4};
  assert_kiln_ok(kiln_tensor_zeros(ctx, empty_shape, 2, KILN_F32, cpu, &t));
  const int64_t ambiguous[] = {0, -1};
  assert_status(kiln_tensor_reshape(t, ambiguous, 2, &v), KILN_ERROR_SHAPE_MISMATCH);
  const int64_t also_ambiguous[] = {2, 0, -1};
  assert_status(kiln_tensor_reshape(t, also_ambiguous, 3, &v), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("any size");
  const int64_t infer_rows[] = {-1, 8};
  assert_kiln_ok(kiln_tensor_reshape(t, infer_rows, 2, &v));
  const int64_t want[] = {0, 8};
  expect_shape(v, want, 2);
  kiln_tensor_release(v);
  /* An empty view is held to the limit of an empty tensor created with its
   * shape: [2^62, 0] f32 is refused by both (its bytes, the zero left out,
   * pass int64), and [2^30, 0, 2^30] is taken by both. */
  const int64_t huge_empty[] = {INT64_C(1) << 62, 0};
  v = SENTINEL;
  assert_status(kiln_tensor_reshape(t, huge_empty, 2, &v), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(v);
  assert_last_error_contains("more bytes than fit in int64");
  kiln_tensor *made = SENTINEL;
  assert_status(kiln_tensor_zeros(ctx, huge_empty, 2, KILN_F32, cpu, &made), KILN_ERROR_INVALID_ARGUMENT);
  const int64_t wide_empty[] = {INT64_C(1) << 30, 0, INT64_C(1) << 30};
  assert_kiln_ok(kiln_tensor_reshape(t, wide_empty, 3, &v));
  kiln_tensor *copy = NULL;
  assert_kiln_ok(kiln_tensor_clone(v, &copy));
  expect_shape(copy, wide_empty, 3);
  kiln_tensor_release(copy);
  kiln_tensor_release(v);
  kiln_tensor_release(t);
}

static void test_rows(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  for (int dv = 0; dv < ndev; ++dv) {
    kiln_tensor *t = counting(ctx, 5, 3, devs[dv]);
    kiln_tensor *r = NULL, *rr = NULL;
    assert_kiln_ok(kiln_tensor_rows(t, 1, 4, &r));
    const int64_t want_shape[] = {3, 3};
    expect_shape(r, want_shape, 2);
    const double want[] = {3, 4, 5, 6, 7, 8, 9, 10, 11};
    assert_tensor_close(r, want, 9, 0.0, 0.0);

    /* Rows of rows: offsets add up. */
    assert_kiln_ok(kiln_tensor_rows(r, 1, 3, &rr));
    const double want_rr[] = {6, 7, 8, 9, 10, 11};
    assert_tensor_close(rr, want_rr, 6, 0.0, 0.0);

    /* Writes through the view land in the right rows of the source. */
    const double minus[] = {-1, -2, -3, -4, -5, -6};
    assert_kiln_ok(kiln_tensor_copy_from_host(rr, minus, sizeof minus));
    const double want_t[] = {0, 1, 2, 3, 4, 5, -1, -2, -3, -4, -5, -6, 12, 13, 14};
    assert_tensor_close(t, want_t, 15, 0.0, 0.0);

    /* Empty ranges at either end. */
    kiln_tensor *e = NULL;
    assert_kiln_ok(kiln_tensor_rows(t, 5, 5, &e));
    const int64_t empty_shape[] = {0, 3};
    expect_shape(e, empty_shape, 2);
    kiln_tensor_release(e);
    assert_kiln_ok(kiln_tensor_rows(t, 0, 0, &e));
    kiln_tensor_release(e);

    kiln_tensor_release(t);
    assert_tensor_close(rr, minus, 6, 0.0, 0.0); /* alive without the source */
    kiln_tensor_release(r);
    kiln_tensor_release(rr);
  }
}

static void test_rows_errors(void **state) {
  kiln_context *ctx = *state;
  kiln_tensor *t = counting(ctx, 5, 3, cpu), *r = SENTINEL;
  assert_status(kiln_tensor_rows(t, -1, 2, &r), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(r);
  assert_last_error_contains("[5, 3]");
  assert_status(kiln_tensor_rows(t, 0, 6, &r), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_rows(t, 3, 2, &r), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_rows(t, 6, 6, &r), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_rows(t, 0, 1, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_rows(NULL, 0, 1, &r), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(t);
  kiln_tensor *s = NULL;
  assert_kiln_ok(kiln_tensor_zeros(ctx, NULL, 0, KILN_F32, cpu, &s));
  assert_status(kiln_tensor_rows(s, 0, 0, &r), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(s);
}

/* Math, copies and casts read a view's own elements, not its source's. */
static void test_views_in_math_and_copies(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  for (int dv = 0; dv < ndev; ++dv) {
    kiln_tensor *t = counting(ctx, 4, 2, devs[dv]);
    kiln_tensor *r = NULL, *sum = NULL, *mm = NULL, *c = NULL, *moved = NULL;
    assert_kiln_ok(kiln_tensor_rows(t, 2, 4, &r)); /* [[4, 5], [6, 7]] */

    assert_kiln_ok(kiln_tensor_binary(KILN_ADD, r, r, &sum));
    const double want_sum[] = {8, 10, 12, 14};
    assert_tensor_close(sum, want_sum, 4, 0.0, 0.0);

    assert_kiln_ok(kiln_tensor_matmul(r, r, &mm));
    const double want_mm[] = {4 * 4 + 5 * 6, 4 * 5 + 5 * 7, 6 * 4 + 7 * 6, 6 * 5 + 7 * 7};
    assert_tensor_close(mm, want_mm, 4, 0.0, 0.0);

    assert_kiln_ok(kiln_tensor_cast(r, KILN_I32, &c));
    const double want_r[] = {4, 5, 6, 7};
    assert_tensor_close(c, want_r, 4, 0.0, 0.0);

    assert_kiln_ok(kiln_tensor_to(r, cpu, &moved));
    double host[4];
    assert_kiln_ok(kiln_tensor_copy_to_host(moved, host, sizeof host));
    assert_memory_equal(host, want_r, sizeof host);

    /* A clone of a view is no view. */
    kiln_tensor *cl = NULL;
    assert_kiln_ok(kiln_tensor_clone(r, &cl));
    const double zeros[8] = {0};
    assert_kiln_ok(kiln_tensor_copy_from_host(t, zeros, sizeof zeros));
    assert_tensor_close(cl, want_r, 4, 0.0, 0.0);

    kiln_tensor_release(cl);
    kiln_tensor_release(moved);
    kiln_tensor_release(c);
    kiln_tensor_release(mm);
    kiln_tensor_release(sum);
    kiln_tensor_release(r);
    kiln_tensor_release(t);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reshape_shares_storage),
      cmocka_unit_test(test_reshape_errors),
      cmocka_unit_test(test_rows),
      cmocka_unit_test(test_rows_errors),
      cmocka_unit_test(test_views_in_math_and_copies),
  };
  return cmocka_run_group_tests(tests, kiln_test_context_setup, kiln_test_context_teardown);
}
