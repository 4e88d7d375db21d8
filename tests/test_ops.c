/* Tensor math against float64 references computed here, on random inputs of
 * several shapes, for every float dtype (and the integer dtypes where the op
 * takes them), on the CPU and on CUDA when a GPU is usable. Since both devices
 * are held to the same reference, they also agree with each other.
 *
 * Tolerances: the reference is computed in double from the values the input
 * tensors actually hold (read back after rounding to their dtype), so the
 * only differences left are the kernel's arithmetic (f32 for every float
 * dtype but f64, unit roundoff `eps`) and the final rounding to the output
 * dtype (unit roundoff `u`). */
#include "support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};

#define SENTINEL ((kiln_tensor *)(uintptr_t)0x1)

typedef struct float_type {
  kiln_dtype dtype;
  double u;   /* unit roundoff of the stored result */
  double eps; /* unit roundoff of the arithmetic */
} float_type;

static const float_type FLOATS[] = {
    {KILN_F32, 0x1p-24, 0x1p-24},
    {KILN_F64, 0x1p-53, 0x1p-53},
    {KILN_F16, 0x1p-11, 0x1p-24},
    {KILN_BF16, 0x1p-8, 0x1p-24},
};
#define N_FLOATS 4

static const kiln_dtype INTS[] = {KILN_I32, KILN_I64, KILN_U8};
#define N_INTS 3

/* Elementwise ops: one rounding of the result, plus a few ulps of f32 libm
 * (or CUDA intrinsics) and cancellation near zero in GELU's 1 + erf. */
static double ew_rtol(const float_type *f) { return 2.0 * f->u + 16.0 * f->eps; }
static double ew_atol(const float_type *f) { return 64.0 * f->eps; }

static int is_int(kiln_dtype d) { return d == KILN_I32 || d == KILN_I64 || d == KILN_U8; }

static int64_t numel_of_shape(const int64_t *shape, int64_t ndim) {
  int64_t n = 1;
  for (int64_t i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

static double *alloc_doubles(int64_t n) {
  double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  assert_non_null(p);
  return p;
}

/* A tensor of dtype on device with values uniform in [lo, hi), rounded down
 * to whole numbers when `whole` or for integer dtypes, and in vals[numel]
 * the values it holds, read back. */
static kiln_tensor *make_values(kiln_context *ctx, kiln_device dev, kiln_dtype dtype, const int64_t *shape,
                                int64_t ndim, double lo, double hi, int whole, kiln_test_rng *rng, double *vals) {
  int64_t n = numel_of_shape(shape, ndim);
  for (int64_t i = 0; i < n; ++i) {
    double v = kiln_test_rng_uniform(rng, lo, hi);
    vals[i] = whole || is_int(dtype) ? floor(v) : v;
  }
  kiln_tensor *f64 = NULL, *typed = NULL, *out = NULL;
  assert_kiln_ok(kiln_tensor_from_host(ctx, n ? vals : NULL, n * 8, shape, ndim, KILN_F64, cpu, &f64));
  assert_kiln_ok(kiln_tensor_cast(f64, dtype, &typed));
  assert_kiln_ok(kiln_tensor_to(typed, dev, &out));
  kiln_tensor_release(f64);
  kiln_tensor_release(typed);
  kiln_test_read_f64(out, vals, n);
  return out;
}

static kiln_tensor *make_input(kiln_context *ctx, kiln_device dev, kiln_dtype dtype, const int64_t *shape,
                               int64_t ndim, double lo, double hi, kiln_test_rng *rng, double *vals) {
  return make_values(ctx, dev, dtype, shape, ndim, lo, hi, 0, rng, vals);
}

static void expect_meta(const kiln_tensor *t, const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                        kiln_device dev) {
  int64_t got_ndim = -1, got[KILN_MAX_DIMS];
  assert_kiln_ok(kiln_tensor_ndim(t, &got_ndim));
  assert_int_equal(got_ndim, ndim);
  assert_kiln_ok(kiln_tensor_shape(t, got, KILN_MAX_DIMS));
  for (int64_t i = 0; i < ndim; ++i) assert_int_equal(got[i], shape[i]);
  kiln_dtype got_dtype;
  assert_kiln_ok(kiln_tensor_dtype(t, &got_dtype));
  assert_int_equal(got_dtype, dtype);
  kiln_device got_dev;
  assert_kiln_ok(kiln_tensor_device(t, &got_dev));
  assert_int_equal(got_dev.kind, dev.kind);
  assert_int_equal(got_dev.index, dev.index);
}

/* ---- broadcasting, by the NumPy rules, written out independently -------- */

typedef struct bcast_case {
  int64_t a[3], na, b[3], nb, out[3], nout;
} bcast_case;

static const bcast_case BCAST_CASES[] = {
    {{2, 3, 4}, 3, {2, 3, 4}, 3, {2, 3, 4}, 3},
    {{3, 1, 4}, 3, {5, 4}, 2, {3, 5, 4}, 3},
    {{0}, 0, {2, 3}, 2, {2, 3}, 2},       /* a 0-d scalar */
    {{4}, 1, {3, 1}, 2, {3, 4}, 2},
    {{0, 4}, 2, {4}, 1, {0, 4}, 2},       /* no elements */
    {{2, 1}, 2, {1, 1, 3}, 3, {1, 2, 3}, 3},
    {{1}, 1, {0}, 0, {1}, 1},
    {{65, 130}, 2, {130}, 1, {65, 130}, 2}, /* big enough for threads */
    {{64, 1}, 2, {1, 300}, 2, {64, 300}, 2},
};
#define N_BCAST ((int)(sizeof BCAST_CASES / sizeof BCAST_CASES[0]))

/* Flat index into an input of shape in[nin] for output element `flat`. */
static int64_t source_index(const int64_t *out, int64_t nout, const int64_t *in, int64_t nin, int64_t flat) {
  int64_t index = 0, stride = 1;
  for (int64_t i = nout - 1; i >= 0; --i) {
    int64_t coord = flat % out[i];
    flat /= out[i];
    int64_t j = i - (nout - nin);
    if (j >= 0) {
      if (in[j] != 1) index += coord * stride;
      stride *= in[j];
    }
  }
  return index;
}

static double ref_binary(kiln_binary_op op, double a, double b, int integral) {
  switch (op) {
    case KILN_ADD: return a + b;
    case KILN_SUB: return a - b;
    case KILN_MUL: return a * b;
    case KILN_DIV: return integral ? (b == 0.0 ? 0.0 : trunc(a / b)) : a / b;
    case KILN_MAXIMUM: return a > b ? a : b;
    case KILN_MINIMUM: return a < b ? a : b;
    case KILN_POW: return pow(a, b);
  }
  return NAN;
}

static double ref_compare(kiln_compare_op op, double a, double b) {
  switch (op) {
    case KILN_EQ: return a == b;
    case KILN_NE: return a != b;
    case KILN_LT: return a < b;
    case KILN_LE: return a <= b;
    case KILN_GT: return a > b;
    case KILN_GE: return a >= b;
  }
  return NAN;
}

/* Input ranges per op: divisors away from 0 and positive bases for pow keep
 * the float references well conditioned; integer ranges keep every result
 * inside the dtype (u8: no negative differences, no products past 255). */
static void binary_ranges(kiln_binary_op op, kiln_dtype dtype, double r[4]) {
  if (dtype == KILN_U8) {
    r[0] = 8; r[1] = 16; r[2] = 0; r[3] = 8;
  } else if (is_int(dtype)) {
    r[0] = -100; r[1] = 100; r[2] = -5; r[3] = 5; /* includes x / 0 = 0 */
  } else if (op == KILN_DIV) {
    r[0] = -3; r[1] = 3; r[2] = 0.5; r[3] = 2.5;
  } else if (op == KILN_POW) {
    r[0] = 0.1; r[1] = 3; r[2] = -2; r[3] = 2;
  } else {
    r[0] = -3; r[1] = 3; r[2] = -3; r[3] = 3;
  }
}

static void run_binary(kiln_context *ctx, kiln_device dev, kiln_dtype dtype, kiln_binary_op op,
                       const bcast_case *c, double rtol, double atol, kiln_test_rng *rng) {
  int64_t na = numel_of_shape(c->a, c->na), nb = numel_of_shape(c->b, c->nb), n = numel_of_shape(c->out, c->nout);
  double *va = alloc_doubles(na), *vb = alloc_doubles(nb), *want = alloc_doubles(n), r[4];
  binary_ranges(op, dtype, r);
  kiln_tensor *a = make_input(ctx, dev, dtype, c->a, c->na, r[0], r[1], rng, va);
  kiln_tensor *b = make_input(ctx, dev, dtype, c->b, c->nb, r[2], r[3], rng, vb);
  kiln_tensor *out = NULL;
  assert_kiln_ok(kiln_tensor_binary(op, a, b, &out));
  expect_meta(out, c->out, c->nout, dtype, dev);
  for (int64_t i = 0; i < n; ++i)
    want[i] = ref_binary(op, va[source_index(c->out, c->nout, c->a, c->na, i)],
                         vb[source_index(c->out, c->nout, c->b, c->nb, i)], is_int(dtype));
  assert_tensor_close(out, want, n, rtol, atol);
  kiln_tensor_release(out);

  kiln_tensor_release(a);
  kiln_tensor_release(b);

  /* The comparisons, once per dtype and shape, on whole numbers so that ties
   * (EQ, LE, GE) happen. */
  kiln_tensor *ra = NULL, *rb = NULL;
  if (op == KILN_ADD) {
    ra = make_values(ctx, dev, dtype, c->a, c->na, 0, 3, 1, rng, va);
    rb = make_values(ctx, dev, dtype, c->b, c->nb, 0, 3, 1, rng, vb);
  }
  for (int cmp = KILN_EQ; op == KILN_ADD && cmp <= KILN_GE; ++cmp) {
    assert_kiln_ok(kiln_tensor_compare((kiln_compare_op)cmp, ra, rb, &out));
    expect_meta(out, c->out, c->nout, KILN_U8, dev);
    for (int64_t i = 0; i < n; ++i)
      want[i] = ref_compare((kiln_compare_op)cmp, va[source_index(c->out, c->nout, c->a, c->na, i)],
                            vb[source_index(c->out, c->nout, c->b, c->nb, i)]);
    assert_tensor_close(out, want, n, 0.0, 0.0);
    kiln_tensor_release(out);
  }
  kiln_tensor_release(ra);
  kiln_tensor_release(rb);
  free(va);
  free(vb);
  free(want);
}

static void test_binary_float(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  kiln_test_rng rng = kiln_test_rng_make(1);
  for (int dv = 0; dv < ndev; ++dv)
    for (int f = 0; f < N_FLOATS; ++f)
      for (int op = KILN_ADD; op <= KILN_POW; ++op)
        for (int c = 0; c < N_BCAST; ++c)
          run_binary(ctx, devs[dv], FLOATS[f].dtype, (kiln_binary_op)op, &BCAST_CASES[c], ew_rtol(&FLOATS[f]),
                     ew_atol(&FLOATS[f]), &rng);
}

static void test_binary_integer(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  kiln_test_rng rng = kiln_test_rng_make(2);
  for (int dv = 0; dv < ndev; ++dv)
    for (int d = 0; d < N_INTS; ++d)
      for (int op = KILN_ADD; op <= KILN_MINIMUM; ++op)
        for (int c = 0; c < N_BCAST; ++c)
          run_binary(ctx, devs[dv], INTS[d], (kiln_binary_op)op, &BCAST_CASES[c], 0.0, 0.0, &rng);
}

static void test_binary_errors(void **state) {
  kiln_context *ctx = *state;
  const int64_t s3[] = {3}, s4[] = {4}, s23[] = {2, 3};
  kiln_tensor *a = NULL, *b = NULL, *c = NULL, *i = NULL, *out = SENTINEL;
  assert_kiln_ok(kiln_tensor_zeros(ctx, s3, 1, KILN_F32, cpu, &a));
  assert_kiln_ok(kiln_tensor_zeros(ctx, s4, 1, KILN_F32, cpu, &b));
  assert_kiln_ok(kiln_tensor_zeros(ctx, s23, 2, KILN_F64, cpu, &c));
  assert_kiln_ok(kiln_tensor_zeros(ctx, s3, 1, KILN_I32, cpu, &i));

  assert_status(kiln_tensor_binary(KILN_ADD, a, b, &out), KILN_ERROR_SHAPE_MISMATCH);
  assert_null(out);
  assert_last_error_contains("[3]");
  assert_last_error_contains("[4]");
  assert_status(kiln_tensor_compare(KILN_LT, a, b, &out), KILN_ERROR_SHAPE_MISMATCH);
  assert_status(kiln_tensor_binary(KILN_MUL, a, c, &out), KILN_ERROR_DTYPE_MISMATCH);
  assert_last_error_contains("f32");
  assert_last_error_contains("f64");
  assert_status(kiln_tensor_compare(KILN_EQ, a, i, &out), KILN_ERROR_DTYPE_MISMATCH);
  assert_status(kiln_tensor_binary(KILN_POW, i, i, &out), KILN_ERROR_DTYPE_MISMATCH);
  assert_last_error_contains("i32");
  assert_status(kiln_tensor_binary((kiln_binary_op)99, a, a, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("99");
  assert_status(kiln_tensor_binary((kiln_binary_op)-1, a, a, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_compare((kiln_compare_op)6, a, a, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_binary(KILN_ADD, NULL, a, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_binary(KILN_ADD, a, NULL, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_binary(KILN_ADD, a, a, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_compare(KILN_EQ, a, a, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(out);

  kiln_device gpu;
  if (kiln_test_gpu_cases(ctx, &gpu)) {
    kiln_tensor *g = NULL;
    assert_kiln_ok(kiln_tensor_to(a, gpu, &g));
    assert_status(kiln_tensor_binary(KILN_ADD, a, g, &out), KILN_ERROR_INVALID_ARGUMENT);
    assert_last_error_contains("tensors are on different devices (cpu and cuda:0)");
    assert_status(kiln_tensor_compare(KILN_EQ, g, a, &out), KILN_ERROR_INVALID_ARGUMENT);
    assert_last_error_contains("(cuda:0 and cpu)");
    assert_status(kiln_tensor_matmul(a, g, &out), KILN_ERROR_INVALID_ARGUMENT);
    kiln_tensor_release(g);
  }
  kiln_tensor_release(a);
  kiln_tensor_release(b);
  kiln_tensor_release(c);
  kiln_tensor_release(i);
}

/* ---- scalar ops ------------------------------------------------------------ */

static void test_scalar(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  kiln_test_rng rng = kiln_test_rng_make(3);
  /* Scalars exact in every float dtype, so "converted to a's dtype" changes
   * nothing and the reference is unambiguous. */
  static const double float_scalars[] = {2.5, -0.75, 0.5};
  static const double int_scalars[] = {7, -3, 0};
  const int64_t shape[] = {4, 37};
  const int64_t n = 4 * 37;
  double va[4 * 37], want[4 * 37];
  for (int dv = 0; dv < ndev; ++dv) {
    for (int f = 0; f < N_FLOATS; ++f) {
      for (int op = KILN_ADD; op <= KILN_POW; ++op) {
        double lo = op == KILN_POW ? 0.1 : -3.0;
        kiln_tensor *a = make_input(ctx, devs[dv], FLOATS[f].dtype, shape, 2, lo, 3.0, &rng, va);
        for (int s = 0; s < 3; ++s) {
          kiln_tensor *out = NULL;
          assert_kiln_ok(kiln_tensor_scalar((kiln_binary_op)op, a, float_scalars[s], &out));
          expect_meta(out, shape, 2, FLOATS[f].dtype, devs[dv]);
          for (int64_t i = 0; i < n; ++i) want[i] = ref_binary((kiln_binary_op)op, va[i], float_scalars[s], 0);
          assert_tensor_close(out, want, n, ew_rtol(&FLOATS[f]), ew_atol(&FLOATS[f]));
          kiln_tensor_release(out);
        }
        kiln_tensor_release(a);
      }
    }
    for (int op = KILN_ADD; op <= KILN_MINIMUM; ++op) {
      kiln_tensor *a = make_input(ctx, devs[dv], KILN_I64, shape, 2, -100.0, 100.0, &rng, va);
      for (int s = 0; s < 3; ++s) {
        kiln_tensor *out = NULL;
        assert_kiln_ok(kiln_tensor_scalar((kiln_binary_op)op, a, int_scalars[s], &out));
        for (int64_t i = 0; i < n; ++i) want[i] = ref_binary((kiln_binary_op)op, va[i], int_scalars[s], 1);
        assert_tensor_close(out, want, n, 0.0, 0.0);
        kiln_tensor_release(out);
      }
      kiln_tensor_release(a);
    }
  }

  kiln_tensor *i = NULL, *f = NULL, *out = SENTINEL;
  assert_kiln_ok(kiln_tensor_zeros(ctx, shape, 2, KILN_I32, cpu, &i));
  assert_kiln_ok(kiln_tensor_zeros(ctx, shape, 2, KILN_F32, cpu, &f));
  assert_status(kiln_tensor_scalar(KILN_ADD, i, 1e10, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(out);
  assert_last_error_contains("i32");
  assert_status(kiln_tensor_scalar(KILN_ADD, i, NAN, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_scalar(KILN_POW, i, 2.0, &out), KILN_ERROR_DTYPE_MISMATCH);
  assert_status(kiln_tensor_scalar((kiln_binary_op)7, f, 2.0, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_scalar(KILN_ADD, NULL, 2.0, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_scalar(KILN_ADD, f, 2.0, NULL), KILN_ERROR_INVALID_ARGUMENT);
  /* An empty tensor and a 0-d one. */
  const int64_t empty[] = {0, 5};
  kiln_tensor *e = NULL;
  assert_kiln_ok(kiln_tensor_zeros(ctx, empty, 2, KILN_F32, cpu, &e));
  assert_kiln_ok(kiln_tensor_scalar(KILN_MUL, e, 3.0, &out));
  expect_meta(out, empty, 2, KILN_F32, cpu);
  kiln_tensor_release(out);
  kiln_tensor_release(e);
  assert_kiln_ok(kiln_tensor_full(ctx, NULL, 0, KILN_F64, cpu, 1.5, &e));
  assert_kiln_ok(kiln_tensor_scalar(KILN_SUB, e, 4.0, &out));
  const double want_scalar[] = {-2.5};
  assert_tensor_close(out, want_scalar, 1, 0.0, 0.0);
  kiln_tensor_release(out);
  kiln_tensor_release(e);
  kiln_tensor_release(i);
  kiln_tensor_release(f);
}

/* ---- unary ops --------------------------------------------------------------- */

static double ref_unary(kiln_unary_op op, double x, double alpha) {
  switch (op) {
    case KILN_NEG: return -x;
    case KILN_ABS: return fabs(x);
    case KILN_EXP: return exp(x);
    case KILN_LOG: return log(x);
    case KILN_SQRT: return sqrt(x);
    case KILN_RELU: return x > 0 ? x : 0.0;
    case KILN_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case KILN_TANH: return tanh(x);
    case KILN_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case KILN_LEAKY_RELU: return x > 0 ? x : alpha * x;
  }
  return NAN;
}

static void test_unary(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  kiln_test_rng rng = kiln_test_rng_make(4);
  const int64_t shapes[][2] = {{3, 50}, {1, 70000}, {0, 4}};
  const int64_t ndims[] = {2, 2, 2};
  double *va = alloc_doubles(70000), *want = alloc_doubles(70000);
  for (int dv = 0; dv < ndev; ++dv) {
    for (int f = 0; f < N_FLOATS; ++f) {
      for (int op = KILN_NEG; op <= KILN_LEAKY_RELU; ++op) {
        double lo = op == KILN_LOG ? 0.05 : op == KILN_SQRT ? 0.0 : -4.0;
        for (int s = 0; s < 3; ++s) {
          int64_t n = numel_of_shape(shapes[s], ndims[s]);
          kiln_tensor *a = make_input(ctx, devs[dv], FLOATS[f].dtype, shapes[s], ndims[s], lo, 4.0, &rng, va);
          double alpha = op == KILN_LEAKY_RELU ? 0.1 : 7.0; /* the others ignore alpha */
          kiln_tensor *out = NULL;
          assert_kiln_ok(kiln_tensor_unary((kiln_unary_op)op, a, alpha, &out));
          expect_meta(out, shapes[s], ndims[s], FLOATS[f].dtype, devs[dv]);
          for (int64_t i = 0; i < n; ++i) want[i] = ref_unary((kiln_unary_op)op, va[i], alpha);
          assert_tensor_close(out, want, n, ew_rtol(&FLOATS[f]), ew_atol(&FLOATS[f]));
          kiln_tensor_release(out);
          kiln_tensor_release(a);
        }
      }
    }
    /* NEG and ABS on integers. */
    for (int d = 0; d < 2; ++d) {
      kiln_tensor *a = make_input(ctx, devs[dv], INTS[d], shapes[0], 2, -100.0, 100.0, &rng, va);
      for (int op = KILN_NEG; op <= KILN_ABS; ++op) {
        kiln_tensor *out = NULL;
        assert_kiln_ok(kiln_tensor_unary((kiln_unary_op)op, a, 0.0, &out));
        for (int64_t i = 0; i < 150; ++i) want[i] = ref_unary((kiln_unary_op)op, va[i], 0.0);
        assert_tensor_close(out, want, 150, 0.0, 0.0);
        kiln_tensor_release(out);
      }
      kiln_tensor_release(a);
    }
  }
  free(va);
  free(want);

  kiln_tensor *i = NULL, *out = SENTINEL;
  const int64_t s[] = {3};
  assert_kiln_ok(kiln_tensor_zeros(ctx, s, 1, KILN_I32, cpu, &i));
  assert_status(kiln_tensor_unary(KILN_EXP, i, 0.0, &out), KILN_ERROR_DTYPE_MISMATCH);
  assert_null(out);
  assert_last_error_contains("exp");
  assert_last_error_contains("i32");
  assert_status(kiln_tensor_unary(KILN_SIGMOID, i, 0.0, &out), KILN_ERROR_DTYPE_MISMATCH);
  assert_status(kiln_tensor_unary((kiln_unary_op)10, i, 0.0, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_unary(KILN_NEG, NULL, 0.0, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_unary(KILN_NEG, i, 0.0, NULL), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(i);
}

/* ---- softmax ----------------------------------------------------------------- */

typedef struct dim_case {
  int64_t shape[3], ndim, dim;
} dim_case;

static const dim_case DIM_CASES[] = {
    {{3, 4, 5}, 3, 0}, {{3, 4, 5}, 3, 1}, {{3, 4, 5}, 3, 2}, {{3, 4, 5}, 3, -1}, {{3, 4, 5}, 3, -3},
    {{7}, 1, 0},       {{0}, 0, 0},       {{2, 0}, 2, 1},    {{0, 3}, 2, 1},     {{33, 1000}, 2, 1},
    {{1000, 33}, 2, 0},
};
#define N_DIM_CASES ((int)(sizeof DIM_CASES / sizeof DIM_CASES[0]))

/* outer, n, inner of a tensor seen around dimension d (0-d: 1, 1, 1). */
static void split_at(const dim_case *c, int64_t *outer, int64_t *n, int64_t *inner) {
  int64_t d = c->dim < 0 ? c->dim + c->ndim : c->dim;
  *outer = *inner = 1;
  *n = c->ndim ? c->shape[d] : 1;
  for (int64_t i = 0; i < c->ndim; ++i) {
    if (i < d) *outer *= c->shape[i];
    if (i > d) *inner *= c->shape[i];
  }
}

static void test_softmax(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  kiln_test_rng rng = kiln_test_rng_make(5);
  double *va = alloc_doubles(33000), *want = alloc_doubles(33000);
  for (int dv = 0; dv < ndev; ++dv) {
    for (int f = 0; f < N_FLOATS; ++f) {
      for (int c = 0; c < N_DIM_CASES; ++c) {
        for (int shifted = 0; shifted < 2; ++shifted) {
          /* Around 1000, exp overflows every float type unless the kernel
           * subtracts the maximum first. */
          double lo = shifted ? 1000.0 : -5.0, hi = shifted ? 1008.0 : 5.0;
          const dim_case *dc = &DIM_CASES[c];
          int64_t outer, n, inner, total = numel_of_shape(dc->shape, dc->ndim);
          split_at(dc, &outer, &n, &inner);
          kiln_tensor *a = make_input(ctx, devs[dv], FLOATS[f].dtype, dc->shape, dc->ndim, lo, hi, &rng, va);
          for (int log_form = 0; log_form < 2; ++log_form) {
            for (int64_t o = 0; o < outer; ++o) {
              for (int64_t in = 0; in < inner; ++in) {
                double mx = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j < n; ++j) mx = fmax(mx, va[(o * n + j) * inner + in]);
                for (int64_t j = 0; j < n; ++j) sum += exp(va[(o * n + j) * inner + in] - mx);
                for (int64_t j = 0; j < n; ++j) {
                  double x = va[(o * n + j) * inner + in] - mx;
                  want[(o * n + j) * inner + in] = log_form ? x - log(sum) : exp(x) / sum;
                }
              }
            }
            kiln_tensor *out = NULL;
            if (log_form) assert_kiln_ok(kiln_tensor_log_softmax(a, dc->dim, &out));
            else assert_kiln_ok(kiln_tensor_softmax(a, dc->dim, &out));
            expect_meta(out, dc->shape, dc->ndim, FLOATS[f].dtype, devs[dv]);
            /* exp and the sum of n terms in the arithmetic's precision. */
            double rtol = 2.0 * FLOATS[f].u + (double)(n + 16) * FLOATS[f].eps;
            assert_tensor_close(out, want, total, rtol, 64.0 * FLOATS[f].eps);
            kiln_tensor_release(out);
          }
          kiln_tensor_release(a);
        }
      }
    }
  }
  free(va);
  free(want);

  const int64_t shape[] = {2, 3};
  kiln_tensor *a = NULL, *i = NULL, *out = SENTINEL;
  assert_kiln_ok(kiln_tensor_zeros(ctx, shape, 2, KILN_F32, cpu, &a));
  assert_kiln_ok(kiln_tensor_zeros(ctx, shape, 2, KILN_I64, cpu, &i));
  assert_status(kiln_tensor_softmax(a, 2, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(out);
  assert_last_error_contains("dim 2");
  assert_status(kiln_tensor_log_softmax(a, -3, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_softmax(i, 0, &out), KILN_ERROR_DTYPE_MISMATCH);
  assert_status(kiln_tensor_log_softmax(i, 0, &out), KILN_ERROR_DTYPE_MISMATCH);
  assert_status(kiln_tensor_softmax(NULL, 0, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_softmax(a, 0, NULL), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(a);
  kiln_tensor_release(i);
}

/* ---- reductions ---------------------------------------------------------------- */

static void reduce_reference(kiln_reduce_op op, const double *va, int64_t outer, int64_t n, int64_t inner,
                             double *want) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      double sum = 0.0, mx = -INFINITY;
      int64_t arg = 0;
      for (int64_t j = 0; j < n; ++j) {
        double x = va[(o * n + j) * inner + in];
        sum += x;
        if (x > mx) {
          mx = x;
          arg = j;
        }
      }
      double r = op == KILN_SUM ? sum : op == KILN_MEAN ? sum / (double)n : op == KILN_MAX ? mx : (double)arg;
      want[o * inner + in] = r;
    }
  }
}

static void run_reduce(kiln_context *ctx, kiln_device dev, kiln_dtype dtype, const float_type *f,
                       const dim_case *dc, kiln_test_rng *rng, double *va, double *want) {
  int64_t outer, n, inner;
  split_at(dc, &outer, &n, &inner);
  int64_t d = dc->dim < 0 ? dc->dim + dc->ndim : dc->dim;
  /* Small whole numbers for integers: sums stay inside u8, ties happen. */
  double lo = is_int(dtype) ? 0.0 : -3.0, hi = is_int(dtype) ? 3.0 : 3.0;
  kiln_tensor *a = make_input(ctx, dev, dtype, dc->shape, dc->ndim, lo, hi, rng, va);
  double sum_abs = 0.0;
  for (int64_t i = 0; i < numel_of_shape(dc->shape, dc->ndim); ++i) sum_abs = fmax(sum_abs, fabs(va[i]));
  sum_abs *= (double)n;
  for (int op = KILN_SUM; op <= KILN_ARGMAX; ++op) {
    if (op == KILN_MEAN && is_int(dtype)) continue;
    if ((op == KILN_MAX || op == KILN_ARGMAX) && n == 0) continue;
    for (int keepdim = 0; keepdim < 2; ++keepdim) {
      int64_t out_shape[3], out_ndim = 0;
      for (int64_t i = 0; i < dc->ndim; ++i) {
        if (i != d) out_shape[out_ndim++] = dc->shape[i];
        else if (keepdim) out_shape[out_ndim++] = 1;
      }
      kiln_tensor *out = NULL;
      assert_kiln_ok(kiln_tensor_reduce((kiln_reduce_op)op, a, dc->dim, keepdim, &out));
      expect_meta(out, out_shape, out_ndim, op == KILN_ARGMAX ? KILN_I64 : dtype, dev);
      reduce_reference((kiln_reduce_op)op, va, outer, n, inner, want);
      /* Sums keep the dtype, so a u8 sum wraps as unsigned arithmetic does. */
      if (dtype == KILN_U8 && op == KILN_SUM)
        for (int64_t i = 0; i < outer * inner; ++i) want[i] = fmod(want[i], 256.0);
      double rtol = 0.0, atol = 0.0;
      if (!is_int(dtype) && op <= KILN_MEAN) {
        /* A sum of n terms in the arithmetic's precision, then one rounding. */
        rtol = 2.0 * f->u;
        atol = (double)(n + 2) * f->eps * sum_abs / (op == KILN_MEAN && n ? (double)n : 1.0);
      }
      assert_tensor_close(out, want, outer * inner, rtol, atol);
      kiln_tensor_release(out);
    }
  }
  kiln_tensor_release(a);
}

static void test_reduce(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  kiln_test_rng rng = kiln_test_rng_make(6);
  double *va = alloc_doubles(33000), *want = alloc_doubles(33000);
  const float_type exact = {KILN_I32, 0.0, 0.0};
  for (int dv = 0; dv < ndev; ++dv) {
    for (int c = 0; c < N_DIM_CASES; ++c) {
      for (int f = 0; f < N_FLOATS; ++f)
        run_reduce(ctx, devs[dv], FLOATS[f].dtype, &FLOATS[f], &DIM_CASES[c], &rng, va, want);
      for (int d = 0; d < N_INTS; ++d) run_reduce(ctx, devs[dv], INTS[d], &exact, &DIM_CASES[c], &rng, va, want);
    }
  }
  free(va);
  free(want);
}

static void test_reduce_empty_and_errors(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  const int64_t shape[] = {3, 0};
  for (int dv = 0; dv < ndev; ++dv) {
    kiln_tensor *a = NULL, *out = SENTINEL;
    assert_kiln_ok(kiln_tensor_zeros(ctx, shape, 2, KILN_F32, devs[dv], &a));
    assert_kiln_ok(kiln_tensor_reduce(KILN_SUM, a, 1, 0, &out));
    const double zeros[] = {0, 0, 0}, nans[] = {NAN, NAN, NAN};
    assert_tensor_close(out, zeros, 3, 0.0, 0.0);
    kiln_tensor_release(out);
    assert_kiln_ok(kiln_tensor_reduce(KILN_MEAN, a, -1, 1, &out));
    const int64_t kept[] = {3, 1};
    expect_meta(out, kept, 2, KILN_F32, devs[dv]);
    assert_tensor_close(out, nans, 3, 0.0, 0.0);
    kiln_tensor_release(out);
    assert_status(kiln_tensor_reduce(KILN_MAX, a, 1, 0, &out), KILN_ERROR_INVALID_ARGUMENT);
    assert_null(out);
    assert_last_error_contains("[3, 0]");
    assert_status(kiln_tensor_reduce(KILN_ARGMAX, a, 1, 0, &out), KILN_ERROR_INVALID_ARGUMENT);
    kiln_tensor_release(a);
  }
  const int64_t s[] = {2, 3};
  kiln_tensor *a = NULL, *i = NULL, *out = SENTINEL;
  assert_kiln_ok(kiln_tensor_zeros(ctx, s, 2, KILN_F32, cpu, &a));
  assert_kiln_ok(kiln_tensor_zeros(ctx, s, 2, KILN_I32, cpu, &i));
  assert_status(kiln_tensor_reduce(KILN_MEAN, i, 0, 0, &out), KILN_ERROR_DTYPE_MISMATCH);
  assert_null(out);
  assert_status(kiln_tensor_reduce(KILN_SUM, a, 2, 0, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_reduce(KILN_SUM, a, -3, 0, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_reduce((kiln_reduce_op)4, a, 0, 0, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_reduce(KILN_SUM, NULL, 0, 0, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_reduce(KILN_SUM, a, 0, 0, NULL), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(a);
  kiln_tensor_release(i);
}

/* A 0-d tensor takes dim 0 and -1 in softmax and reductions, as PyTorch's
 * (torch.tensor(2.5).softmax(0) is 1, .sum(-1) 2.5, .argmax(0) 0), though it
 * has no dimension for kiln_tensor_dim; other dims are refused, saying the
 * range. */
static void test_scalar_dims(void **state) {
  kiln_context *ctx = *state;
  const float v = 2.5f;
  kiln_tensor *a = NULL, *out = SENTINEL;
  assert_kiln_ok(kiln_tensor_from_host(ctx, &v, sizeof v, NULL, 0, KILN_F32, cpu, &a));
  for (int64_t dim = -1; dim <= 0; ++dim) {
    const double one = 1, zero = 0, same = 2.5;
    assert_kiln_ok(kiln_tensor_softmax(a, dim, &out));
    expect_meta(out, NULL, 0, KILN_F32, cpu);
    assert_tensor_close(out, &one, 1, 0.0, 0.0);
    kiln_tensor_release(out);
    assert_kiln_ok(kiln_tensor_log_softmax(a, dim, &out));
    assert_tensor_close(out, &zero, 1, 0.0, 0.0);
    kiln_tensor_release(out);
    assert_kiln_ok(kiln_tensor_reduce(KILN_SUM, a, dim, 0, &out));
    expect_meta(out, NULL, 0, KILN_F32, cpu);
    assert_tensor_close(out, &same, 1, 0.0, 0.0);
    kiln_tensor_release(out);
    assert_kiln_ok(kiln_tensor_reduce(KILN_ARGMAX, a, dim, 1, &out));
    expect_meta(out, NULL, 0, KILN_I64, cpu);
    assert_tensor_close(out, &zero, 1, 0.0, 0.0);
    kiln_tensor_release(out);
    int64_t size = -1;
    assert_status(kiln_tensor_dim(a, dim, &size), KILN_ERROR_INVALID_ARGUMENT);
    assert_last_error_contains("0-d tensor: it has no dimensions");
  }
  const int64_t refused[] = {1, -2};
  for (int r = 0; r < 2; ++r) {
    out = SENTINEL;
    assert_status(kiln_tensor_softmax(a, refused[r], &out), KILN_ERROR_INVALID_ARGUMENT);
    assert_null(out);
    assert_last_error_contains("need -1 <= dim < 1");
    assert_status(kiln_tensor_reduce(KILN_MAX, a, refused[r], 0, &out), KILN_ERROR_INVALID_ARGUMENT);
    assert_last_error_contains("need -1 <= dim < 1");
  }
  kiln_tensor_release(a);
}

/* ---- matmul -------------------------------------------------------------------- */

typedef struct mm_case {
  int64_t a[2], na, b[2], nb, out[2], nout;
} mm_case;

static const mm_case MM_CASES[] = {
    {{1, 1}, 2, {1, 1}, 2, {1, 1}, 2},
    {{7, 5}, 2, {5, 3}, 2, {7, 3}, 2},
    {{33, 17}, 2, {17, 9}, 2, {33, 9}, 2},
    {{64, 130}, 2, {130, 31}, 2, {64, 31}, 2},
    {{5}, 1, {5, 4}, 2, {4}, 1},
    {{6, 5}, 2, {5}, 1, {6}, 1},
    {{9}, 1, {9}, 1, {0}, 0},
    {{3, 0}, 2, {0, 4}, 2, {3, 4}, 2}, /* an empty sum: zeros */
    {{0, 5}, 2, {5, 2}, 2, {0, 2}, 2},
};
#define N_MM ((int)(sizeof MM_CASES / sizeof MM_CASES[0]))

static void test_matmul(void **state) {
  kiln_context *ctx = *state;
  kiln_device devs[2];
  int ndev = kiln_test_devices(ctx, devs);
  kiln_test_rng rng = kiln_test_rng_make(7);
  double *va = alloc_doubles(64 * 130), *vb = alloc_doubles(130 * 31), *want = alloc_doubles(64 * 31);
  for (int dv = 0; dv < ndev; ++dv) {
    for (int f = 0; f < N_FLOATS; ++f) {
      for (int c = 0; c < N_MM; ++c) {
        const mm_case *mc = &MM_CASES[c];
        int64_t m = mc->na == 2 ? mc->a[0] : 1, k = mc->na == 2 ? mc->a[1] : mc->a[0];
        int64_t n = mc->nb == 2 ? mc->b[1] : 1;
        kiln_tensor *a = make_input(ctx, devs[dv], FLOATS[f].dtype, mc->a, mc->na, -1.0, 1.0, &rng, va);
        kiln_tensor *b = make_input(ctx, devs[dv], FLOATS[f].dtype, mc->b, mc->nb, -1.0, 1.0, &rng, vb);
        double worst_abs = 0.0; /* max over outputs of sum_j |a_ij b_jl| */
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t l = 0; l < n; ++l) {
            double s = 0.0, s_abs = 0.0;
            for (int64_t j = 0; j < k; ++j) {
              s += va[i * k + j] * vb[j * n + l];
              s_abs += fabs(va[i * k + j] * vb[j * n + l]);
            }
            want[i * n + l] = s;
            worst_abs = fmax(worst_abs, s_abs);
          }
        }
        kiln_tensor *out = NULL;
        assert_kiln_ok(kiln_tensor_matmul(a, b, &out));
        expect_meta(out, mc->out, mc->nout, FLOATS[f].dtype, devs[dv]);
        /* The classic dot-product bound, k * eps * sum |a b|, doubled for a
         * blocked summation order, then one rounding to the output. */
        assert_tensor_close(out, want, m * n, 2.0 * FLOATS[f].u, 2.0 * (double)(k + 1) * FLOATS[f].eps * worst_abs);
        kiln_tensor_release(out);
        kiln_tensor_release(a);
        kiln_tensor_release(b);
      }
    }
  }
  free(va);
  free(vb);
  free(want);

  const int64_t s23[] = {2, 3}, s42[] = {4, 2}, s3[] = {3}, s223[] = {2, 2, 3};
  kiln_tensor *a = NULL, *b = NULL, *v = NULL, *cube = NULL, *i = NULL, *d = NULL, *sc = NULL, *out = SENTINEL;
  assert_kiln_ok(kiln_tensor_zeros(ctx, s23, 2, KILN_F32, cpu, &a));
  assert_kiln_ok(kiln_tensor_zeros(ctx, s42, 2, KILN_F32, cpu, &b));
  assert_kiln_ok(kiln_tensor_zeros(ctx, s3, 1, KILN_F32, cpu, &v));
  assert_kiln_ok(kiln_tensor_zeros(ctx, s223, 3, KILN_F32, cpu, &cube));
  assert_kiln_ok(kiln_tensor_zeros(ctx, s23, 2, KILN_I32, cpu, &i));
  assert_kiln_ok(kiln_tensor_zeros(ctx, s23, 2, KILN_F64, cpu, &d));
  assert_kiln_ok(kiln_tensor_zeros(ctx, NULL, 0, KILN_F32, cpu, &sc));
  assert_status(kiln_tensor_matmul(a, b, &out), KILN_ERROR_SHAPE_MISMATCH);
  assert_null(out);
  assert_last_error_contains("[2, 3]");
  assert_last_error_contains("[4, 2]");
  assert_status(kiln_tensor_matmul(v, b, &out), KILN_ERROR_SHAPE_MISMATCH);
  assert_status(kiln_tensor_matmul(cube, v, &out), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("[2, 2, 3]");
  assert_status(kiln_tensor_matmul(sc, sc, &out), KILN_ERROR_SHAPE_MISMATCH);
  assert_status(kiln_tensor_matmul(i, i, &out), KILN_ERROR_DTYPE_MISMATCH);
  assert_status(kiln_tensor_matmul(a, d, &out), KILN_ERROR_DTYPE_MISMATCH);
  assert_status(kiln_tensor_matmul(NULL, a, &out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_tensor_matmul(a, a, NULL), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor *all[] = {a, b, v, cube, i, d, sc};
  for (int j = 0; j < 7; ++j) kiln_tensor_release(all[j]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_binary_float),
      cmocka_unit_test(test_binary_integer),
      cmocka_unit_test(test_binary_errors),
      cmocka_unit_test(test_scalar),
      cmocka_unit_test(test_unary),
      cmocka_unit_test(test_softmax),
      cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_reduce_empty_and_errors),
      cmocka_unit_test(test_scalar_dims),
      cmocka_unit_test(test_matmul),
  };
  return cmocka_run_group_tests(tests, kiln_test_context_setup, kiln_test_context_teardown);
}
