/* Datasets from tensors: validation, normalised batches on every device,
 * seeded splits (checked against an independent implementation of the
 * documented algorithm), and concurrent readers. */
#include "support.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};

static int64_t query(kiln_status (*fn)(const kiln_dataset *, int64_t *), const kiln_dataset *ds) {
  int64_t v = -1;
  assert_kiln_ok(fn(ds, &v));
  return v;
}

static kiln_tensor *tensor_of(kiln_context *ctx, const void *data, int64_t nbytes, const int64_t *shape, int64_t ndim,
                              kiln_dtype dtype) {
  kiln_tensor *t = NULL;
  assert_kiln_ok(kiln_tensor_from_host(ctx, data, nbytes, shape, ndim, dtype, cpu, &t));
  return t;
}

/* A dataset of n samples with u8 features [n, 2, 3] (feature p of sample i is
 * (11 * i + 5 * p) % 256) and i64 labels y[i] = i (so a batch's labels say
 * which rows it holds). */
static kiln_dataset *indexed_dataset(kiln_context *ctx, int64_t n) {
  unsigned char *x = malloc((size_t)n * 6);
  int64_t *y = malloc((size_t)n * sizeof(int64_t));
  assert_non_null(x);
  assert_non_null(y);
  for (int64_t i = 0; i < n; ++i) {
    for (int p = 0; p < 6; ++p) x[i * 6 + p] = (unsigned char)((11 * i + 5 * p) % 256);
    y[i] = i;
  }
  const int64_t xs[3] = {n, 2, 3}, ys[1] = {n};
  kiln_tensor *tx = tensor_of(ctx, x, n * 6, xs, 3, KILN_U8), *ty = tensor_of(ctx, y, n * 8, ys, 1, KILN_I64);
  free(x);
  free(y);
  kiln_dataset *ds = NULL;
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, tx, ty, &ds));
  /* The dataset references the tensors; the caller's handles may go. */
  kiln_tensor_release(tx);
  kiln_tensor_release(ty);
  return ds;
}

/* The labels of batch [0, size) of ds: for an indexed_dataset (or a split
 * of one), the source rows it holds, in order. */
static void rows_of(const kiln_dataset *ds, int64_t *rows, int64_t n) {
  assert_int_equal(query(kiln_dataset_size, ds), n);
  kiln_tensor *x = NULL, *y = NULL;
  assert_kiln_ok(kiln_dataset_batch(ds, 0, n, cpu, &x, &y));
  kiln_dtype dt;
  assert_kiln_ok(kiln_tensor_dtype(y, &dt));
  assert_int_equal(dt, KILN_I64);
  assert_kiln_ok(kiln_tensor_copy_to_host(y, rows, n * (int64_t)sizeof(int64_t)));
  kiln_tensor_release(x);
  kiln_tensor_release(y);
}

/* ---- construction ---------------------------------------------------------- */

static void test_queries(void **state) {
  kiln_context *ctx = *state;
  kiln_dataset *ds = indexed_dataset(ctx, 12);
  assert_int_equal(query(kiln_dataset_size, ds), 12);
  assert_int_equal(query(kiln_dataset_num_features, ds), 6);
  assert_int_equal(query(kiln_dataset_num_classes, ds), 12); /* 1 + max label 11 */
  kiln_dataset_release(ds);
  kiln_dataset_release(NULL);
}

/* One sample is the smallest dataset (none is refused: below), and its
 * batch reads it back. */
static void test_one_sample(void **state) {
  kiln_context *ctx = *state;
  const float xv[3] = {0.5f, -1.5f, 2.0f};
  const int64_t yv[1] = {4}, x13[2] = {1, 3}, y1[1] = {1};
  kiln_tensor *x = tensor_of(ctx, xv, sizeof xv, x13, 2, KILN_F32), *y = tensor_of(ctx, yv, sizeof yv, y1, 1, KILN_I64);
  kiln_dataset *ds = NULL;
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, x, y, &ds));
  assert_int_equal(query(kiln_dataset_size, ds), 1);
  assert_int_equal(query(kiln_dataset_num_classes, ds), 5);
  kiln_tensor *bx = NULL, *by = NULL;
  assert_kiln_ok(kiln_dataset_batch(ds, 0, 1, cpu, &bx, &by));
  double got_x[3];
  int64_t got_y = -1;
  kiln_test_read_f64(bx, got_x, 3);
  assert_kiln_ok(kiln_tensor_copy_to_host(by, &got_y, sizeof got_y));
  for (int i = 0; i < 3; ++i) assert_true(got_x[i] == xv[i]);
  assert_int_equal(got_y, 4);
  kiln_tensor_release(bx);
  kiln_tensor_release(by);
  kiln_dataset_release(ds);
  kiln_tensor_release(x);
  kiln_tensor_release(y);
}

static void test_from_tensors_errors(void **state) {
  kiln_context *ctx = *state;
  float xv[12] = {0};
  int64_t yv[4] = {0, 1, 2, 3};
  const int64_t x43[2] = {4, 3}, x0[2] = {0, 3}, x40[2] = {4, 0}, y4[1] = {4}, y3[1] = {3}, y41[2] = {4, 1};
  kiln_tensor *x = tensor_of(ctx, xv, 48, x43, 2, KILN_F32);
  kiln_tensor *y = tensor_of(ctx, yv, 32, y4, 1, KILN_I64);
  kiln_dataset *ds = (kiln_dataset *)(uintptr_t)1;

  kiln_tensor *y_short = tensor_of(ctx, yv, 24, y3, 1, KILN_I64);
  assert_status(kiln_dataset_from_tensors(ctx, x, y_short, &ds), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("x has 4 samples");
  assert_null(ds);

  kiln_tensor *y_2d = tensor_of(ctx, yv, 32, y41, 2, KILN_I64);
  assert_status(kiln_dataset_from_tensors(ctx, x, y_2d, &ds), KILN_ERROR_SHAPE_MISMATCH);
  kiln_tensor *y_float_1d = tensor_of(ctx, xv, 16, y4, 1, KILN_F32);
  assert_status(kiln_dataset_from_tensors(ctx, x, y_float_1d, &ds), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("[N, k]");

  kiln_tensor *x_int = tensor_of(ctx, xv, 48, x43, 2, KILN_I32);
  assert_status(kiln_dataset_from_tensors(ctx, x_int, y, &ds), KILN_ERROR_DTYPE_MISMATCH);

  kiln_tensor *x_empty = NULL, *x_nofeat = NULL;
  assert_kiln_ok(kiln_tensor_empty(ctx, x0, 2, KILN_F32, cpu, &x_empty));
  assert_kiln_ok(kiln_tensor_empty(ctx, x40, 2, KILN_F32, cpu, &x_nofeat));
  assert_status(kiln_dataset_from_tensors(ctx, x_empty, y, &ds), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_dataset_from_tensors(ctx, x_nofeat, y, &ds), KILN_ERROR_INVALID_ARGUMENT);

  int64_t negv[4] = {0, 1, -3, 2};
  kiln_tensor *y_neg = tensor_of(ctx, negv, 32, y4, 1, KILN_I64);
  assert_status(kiln_dataset_from_tensors(ctx, x, y_neg, &ds), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("negative label -3 at sample 2");

  /* Tensors of another context. */
  kiln_context *other = kiln_test_context_create(1);
  kiln_tensor *y_other = NULL;
  assert_kiln_ok(kiln_tensor_from_host(other, yv, 32, y4, 1, KILN_I64, cpu, &y_other));
  assert_status(kiln_dataset_from_tensors(ctx, x, y_other, &ds), KILN_ERROR_INVALID_ARGUMENT);

  assert_status(kiln_dataset_from_tensors(ctx, NULL, y, &ds), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_dataset_from_tensors(ctx, x, y, NULL), KILN_ERROR_INVALID_ARGUMENT);
  /* A tensor handle passed as a dataset is not a dataset. */
  int64_t v = 0;
  assert_status(kiln_dataset_size((const kiln_dataset *)x, &v), KILN_ERROR_INVALID_HANDLE);
  assert_null(ds);

  kiln_tensor *all[] = {x, y, y_short, y_2d, y_float_1d, x_int, x_empty, x_nofeat, y_neg, y_other};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) kiln_tensor_release(all[i]);
  kiln_context_release(other);
}

/* ---- batches ------------------------------------------------------------- */

static void test_batch_normalisation(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  kiln_dataset *ds = indexed_dataset(ctx, 9);
  double want[5 * 6], want_y[5];
  for (int dv = 0; dv < ndev; ++dv) {
    for (int pass = 0; pass < 2; ++pass) {
      /* pass 0: the u8 default x / 255; pass 1: (x / 255 - 0.5) / 0.25. */
      if (pass == 1) assert_kiln_ok(kiln_dataset_set_normalization(ds, 1.0 / 255.0, 0.5, 0.25));
      kiln_tensor *x = NULL, *y = NULL;
      assert_kiln_ok(kiln_dataset_batch(ds, 3, 5, devs[dv], &x, &y));
      for (int r = 0; r < 5; ++r) {
        for (int p = 0; p < 6; ++p) {
          double raw = (double)((11 * (3 + r) + 5 * p) % 256);
          want[r * 6 + p] = pass == 0 ? raw / 255.0 : (raw / 255.0 - 0.5) / 0.25;
        }
        want_y[r] = 3 + r;
      }
      int64_t shape[2];
      kiln_dtype dt;
      kiln_device where;
      assert_kiln_ok(kiln_tensor_shape(x, shape, 2));
      assert_int_equal(shape[0], 5);
      assert_int_equal(shape[1], 6);
      assert_kiln_ok(kiln_tensor_dtype(x, &dt));
      assert_int_equal(dt, KILN_F32);
      assert_kiln_ok(kiln_tensor_device(x, &where));
      assert_int_equal(where.kind, devs[dv].kind);
      assert_tensor_close(x, want, 30, 1e-6, 1e-6);
      assert_tensor_close(y, want_y, 5, 0.0, 0.0);
      kiln_tensor_release(x);
      kiln_tensor_release(y);
    }
    assert_kiln_ok(kiln_dataset_set_normalization(ds, 1.0 / 255.0, 0.0, 1.0));
  }
  kiln_dataset_release(ds);
}

/* Float features default to no scaling; float targets come back as f32
 * [count, k] and num_classes is k. */
static void test_float_targets(void **state) {
  kiln_context *ctx = *state;
  double xv[8] = {1, 2, 3, 4, 5, 6, 7, 8}, tv[12] = {0.5, -1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11.25};
  const int64_t xs[2] = {4, 2}, ts[2] = {4, 3};
  kiln_tensor *x = tensor_of(ctx, xv, 64, xs, 2, KILN_F64), *t = tensor_of(ctx, tv, 96, ts, 2, KILN_F64);
  kiln_dataset *ds = NULL;
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, x, t, &ds));
  assert_int_equal(query(kiln_dataset_num_classes, ds), 3);
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  for (int dv = 0; dv < ndev; ++dv) {
    kiln_tensor *bx = NULL, *by = NULL;
    assert_kiln_ok(kiln_dataset_batch(ds, 1, 3, devs[dv], &bx, &by));
    assert_tensor_close(bx, xv + 2, 6, 0.0, 0.0);
    assert_tensor_close(by, tv + 3, 9, 0.0, 0.0);
    kiln_dtype dt;
    assert_kiln_ok(kiln_tensor_dtype(by, &dt));
    assert_int_equal(dt, KILN_F32);
    kiln_tensor_release(bx);
    kiln_tensor_release(by);
  }
  kiln_tensor_release(x);
  kiln_tensor_release(t);
  kiln_dataset_release(ds);
}

static void test_batch_and_normalisation_errors(void **state) {
  kiln_context *ctx = *state;
  kiln_dataset *ds = indexed_dataset(ctx, 10);
  kiln_tensor *x = (kiln_tensor *)(uintptr_t)1, *y = (kiln_tensor *)(uintptr_t)1;
  const int64_t bad[][2] = {{-1, 2}, {0, 0}, {0, -1}, {9, 2}, {10, 1}, {0, 11}, {5, INT64_MAX}, {INT64_MAX, 1}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    assert_status(kiln_dataset_batch(ds, bad[i][0], bad[i][1], cpu, &x, &y), KILN_ERROR_INVALID_ARGUMENT);
    assert_null(x);
    assert_null(y);
  }
  const kiln_device nowhere = {KILN_DEVICE_CUDA, 99};
  assert_status(kiln_dataset_batch(ds, 0, 1, nowhere, &x, &y), KILN_ERROR_DEVICE_UNAVAILABLE);
  assert_status(kiln_dataset_batch(ds, 0, 1, cpu, &x, &x), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_dataset_batch(ds, 0, 1, cpu, NULL, &y), KILN_ERROR_INVALID_ARGUMENT);

  const double bad_norm[][3] = {{1, 0, 0}, {1, 0, -1}, {NAN, 0, 1}, {1, INFINITY, 1}, {1, 0, NAN}, {1, 0, 1e-320}};
  for (size_t i = 0; i < sizeof bad_norm / sizeof bad_norm[0]; ++i)
    assert_status(kiln_dataset_set_normalization(ds, bad_norm[i][0], bad_norm[i][1], bad_norm[i][2]),
                  KILN_ERROR_INVALID_ARGUMENT);
  /* The message gives the values as they read back, not as "%f" would
   * (0.000000 for a std of 1e-320). */
  assert_last_error_contains("std 1e-320 is too small for scale 1 and mean 0");
  /* A failed setting leaves the old one: still x / 255. */
  assert_kiln_ok(kiln_dataset_batch(ds, 0, 1, cpu, &x, &y));
  double want[6];
  for (int p = 0; p < 6; ++p) want[p] = (5 * p) / 255.0;
  assert_tensor_close(x, want, 6, 1e-6, 0.0);
  kiln_tensor_release(x);
  kiln_tensor_release(y);
  kiln_dataset_release(ds);
}

/* ---- splits ---------------------------------------------------------------- */

/* The documented split, implemented here independently: Fisher-Yates over
 * 0..n-1 where draw i is SplitMix64's finaliser of (seed, i) (core/rng.hpp)
 * scaled to [0, i] by a 128-bit multiply; the first round(n * fraction)
 * positions are the validation part; both parts sorted. */
static uint64_t rng_bits(uint64_t seed, uint64_t counter) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (counter + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int compare_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static void reference_split(int64_t n, int64_t n_val, uint64_t seed, int64_t *train, int64_t *val) {
  int64_t *perm = malloc((size_t)n * sizeof(int64_t));
  assert_non_null(perm);
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = (int64_t)(((unsigned __int128)rng_bits(seed, (uint64_t)i) * (uint64_t)(i + 1)) >> 64);
    int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  memcpy(val, perm, (size_t)n_val * sizeof(int64_t));
  memcpy(train, perm + n_val, (size_t)(n - n_val) * sizeof(int64_t));
  qsort(val, (size_t)n_val, sizeof(int64_t), compare_i64);
  qsort(train, (size_t)(n - n_val), sizeof(int64_t), compare_i64);
  free(perm);
}

static void test_split_matches_reference(void **state) {
  kiln_context *ctx = *state;
  enum { N = 101 };
  kiln_dataset *ds = indexed_dataset(ctx, N);
  const uint64_t seeds[] = {0, 42, 0xdeadbeefcafef00dull};
  for (size_t s = 0; s < 3; ++s) {
    kiln_dataset *train = NULL, *val = NULL;
    assert_kiln_ok(kiln_dataset_split(ds, 0.25, seeds[s], &train, &val));
    const int64_t n_val = 25; /* round(101 * 0.25) = round(25.25) */
    int64_t got_train[N], got_val[N], want_train[N], want_val[N];
    rows_of(train, got_train, N - n_val);
    rows_of(val, got_val, n_val);
    reference_split(N, n_val, seeds[s], want_train, want_val);
    assert_memory_equal(got_train, want_train, (N - n_val) * sizeof(int64_t));
    assert_memory_equal(got_val, want_val, n_val * sizeof(int64_t));

    /* Disjoint and covering: every row exactly once across the two. */
    int seen[N] = {0};
    for (int64_t i = 0; i < N - n_val; ++i) seen[got_train[i]]++;
    for (int64_t i = 0; i < n_val; ++i) seen[got_val[i]]++;
    for (int i = 0; i < N; ++i) assert_int_equal(seen[i], 1);

    /* Parts keep the source's class count and normalisation. */
    assert_int_equal(query(kiln_dataset_num_classes, val), N);
    assert_int_equal(query(kiln_dataset_num_features, val), 6);
    kiln_dataset_release(train);
    kiln_dataset_release(val);
  }
  kiln_dataset_release(ds);
}

static void test_split_deterministic_and_nested(void **state) {
  kiln_context *ctx = *state;
  enum { N = 50 };
  kiln_dataset *ds = indexed_dataset(ctx, N);
  kiln_dataset *a_train, *a_val, *b_train, *b_val, *c_train, *c_val;
  assert_kiln_ok(kiln_dataset_split(ds, 0.2, 7, &a_train, &a_val));
  assert_kiln_ok(kiln_dataset_split(ds, 0.2, 7, &b_train, &b_val));
  assert_kiln_ok(kiln_dataset_split(ds, 0.2, 8, &c_train, &c_val));
  int64_t a[N], b[N], c[N];
  rows_of(a_val, a, 10);
  rows_of(b_val, b, 10);
  rows_of(c_val, c, 10);
  assert_memory_equal(a, b, sizeof(int64_t) * 10);
  assert_memory_not_equal(a, c, sizeof(int64_t) * 10);

  /* A split of a split selects from its parent's rows: the reference split
   * of positions 0..39, mapped through the parent's row list. */
  int64_t parent[N];
  rows_of(a_train, parent, 40);
  kiln_dataset *inner_train, *inner_val;
  assert_kiln_ok(kiln_dataset_split(a_train, 0.5, 3, &inner_train, &inner_val));
  int64_t got[N], want_train[N], want_val[N];
  reference_split(40, 20, 3, want_train, want_val);
  rows_of(inner_val, got, 20);
  for (int i = 0; i < 20; ++i) assert_int_equal(got[i], parent[want_val[i]]);

  /* Normalisation set on a split applies to it alone. */
  assert_kiln_ok(kiln_dataset_set_normalization(inner_val, 1.0, 0.0, 1.0));
  kiln_tensor *x = NULL, *y = NULL;
  assert_kiln_ok(kiln_dataset_batch(inner_val, 0, 1, cpu, &x, &y));
  double raw[6];
  for (int p = 0; p < 6; ++p) raw[p] = (double)((11 * got[0] + 5 * p) % 256);
  assert_tensor_close(x, raw, 6, 0.0, 0.0);
  kiln_tensor_release(x);
  kiln_tensor_release(y);
  assert_kiln_ok(kiln_dataset_batch(inner_train, 0, 1, cpu, &x, &y));
  double first_train[1];
  kiln_test_read_f64(y, first_train, 1);
  double scaled[6];
  for (int p = 0; p < 6; ++p) scaled[p] = ((11 * (int64_t)first_train[0] + 5 * p) % 256) / 255.0;
  assert_tensor_close(x, scaled, 6, 1e-6, 0.0);
  kiln_tensor_release(x);
  kiln_tensor_release(y);

  kiln_dataset *all[] = {a_train, a_val, b_train, b_val, c_train, c_val, inner_train, inner_val};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) kiln_dataset_release(all[i]);
  kiln_dataset_release(ds);
}

static void test_split_errors(void **state) {
  kiln_context *ctx = *state;
  kiln_dataset *ds = indexed_dataset(ctx, 4);
  kiln_dataset *train = (kiln_dataset *)(uintptr_t)1, *val = (kiln_dataset *)(uintptr_t)1;
  const double bad[] = {0.0, 1.0, -0.5, 1.5, NAN, INFINITY, 0.1 /* round(0.4) = 0 */, 0.9 /* leaves 0 */};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    assert_status(kiln_dataset_split(ds, bad[i], 1, &train, &val), KILN_ERROR_INVALID_ARGUMENT);
    assert_null(train);
    assert_null(val);
  }
  assert_status(kiln_dataset_split(ds, 0.5, 1, &train, &train), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_dataset_split(ds, 0.5, 1, NULL, &val), KILN_ERROR_INVALID_ARGUMENT);
  assert_kiln_ok(kiln_dataset_split(ds, 0.5, 1, &train, &val));
  /* The parts outlive their source. */
  kiln_dataset_release(ds);
  int64_t rows[2];
  rows_of(val, rows, 2);
  kiln_dataset_release(train);
  kiln_dataset_release(val);
}

/* ---- threads --------------------------------------------------------------- */

typedef struct {
  const kiln_dataset *ds;
  kiln_device device;
  int failures;
} reader_job;

/* Batches of 7 from every start, checking each label against its features'
 * first value (11 * row % 256 / 255): any mix-up between threads shows. */
static void *read_batches(void *arg) {
  reader_job *job = arg;
  int64_t size = 0;
  if (kiln_dataset_size(job->ds, &size) != KILN_OK) {
    job->failures++;
    return NULL;
  }
  for (int round = 0; round < 20; ++round) {
    for (int64_t start = 0; start + 7 <= size; start += 3) {
      kiln_tensor *x = NULL, *y = NULL;
      float xs[7 * 6];
      int64_t ys[7];
      if (kiln_dataset_batch(job->ds, start, 7, job->device, &x, &y) != KILN_OK ||
          kiln_tensor_copy_to_host(x, xs, sizeof xs) != KILN_OK || kiln_tensor_copy_to_host(y, ys, sizeof ys) != KILN_OK)
        job->failures++;
      else
        for (int r = 0; r < 7; ++r)
          if (fabsf(xs[r * 6] - (float)((11 * ys[r]) % 256) / 255.0f) > 1e-6f) job->failures++;
      kiln_tensor_release(x);
      kiln_tensor_release(y);
    }
  }
  return NULL;
}

static void test_concurrent_readers(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  kiln_dataset *ds = indexed_dataset(ctx, 60), *train = NULL, *val = NULL;
  assert_kiln_ok(kiln_dataset_split(ds, 0.5, 11, &train, &val));
  enum { THREADS = 6 };
  pthread_t threads[THREADS];
  reader_job jobs[THREADS];
  for (int i = 0; i < THREADS; ++i) {
    jobs[i].ds = (i % 3 == 0) ? ds : (i % 3 == 1) ? train : val;
    jobs[i].device = devs[i % ndev];
    jobs[i].failures = 0;
    assert_int_equal(pthread_create(&threads[i], NULL, read_batches, &jobs[i]), 0);
  }
  for (int i = 0; i < THREADS; ++i) {
    assert_int_equal(pthread_join(threads[i], NULL), 0);
    assert_int_equal(jobs[i].failures, 0);
  }
  kiln_dataset_release(train);
  kiln_dataset_release(val);
  kiln_dataset_release(ds);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_queries),
      cmocka_unit_test(test_one_sample),
      cmocka_unit_test(test_from_tensors_errors),
      cmocka_unit_test(test_batch_normalisation),
      cmocka_unit_test(test_float_targets),
      cmocka_unit_test(test_batch_and_normalisation_errors),
      cmocka_unit_test(test_split_matches_reference),
      cmocka_unit_test(test_split_deterministic_and_nested),
      cmocka_unit_test(test_split_errors),
      cmocka_unit_test(test_concurrent_readers),
  };
  return cmocka_run_group_tests(tests, kiln_test_context_setup, kiln_test_context_teardown);
}
