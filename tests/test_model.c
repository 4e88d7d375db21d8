/* Model specs (building, parsing, describing, errors), initialisation,
 * forward passes against a float64 reference computed here from the
 * parameters, predict, parameter views and names, and model files.
 *
 * test_model runs everything on the CPU; test_model_cuda (KILN_TEST_DEVICE=
 * cuda, skipped without a device) runs the cases that involve a device on
 * cuda:0 alone (f32 models: f64 models are CPU-only) and skips the
 * device-independent ones (specs, handles). */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};
/* The device of the device cases (set by the group setup). */
static kiln_device dev = {KILN_DEVICE_CPU, -1};
static int gpu_run = 0;

static int setup(void **state) {
  kiln_test_context_setup(state);
  dev = kiln_test_device(*state);
  gpu_run = dev.kind == KILN_DEVICE_CUDA;
  return 0;
}

/* Device-independent cases run in the CPU program only. */
#define CPU_HALF_ONLY() \
  do {                  \
    if (gpu_run) skip(); \
  } while (0)

/* f32 always; f64 too where models can be f64 (the CPU). */
static int model_dtypes(void) { return gpu_run ? 1 : 2; }

static kiln_model_spec *spec_from(const char *text) {
  kiln_model_spec *spec = NULL;
  assert_kiln_ok(kiln_model_spec_create(&spec));
  assert_kiln_ok(kiln_model_spec_parse(spec, text));
  return spec;
}

static kiln_model *model_on(kiln_context *ctx, const char *text, kiln_device device, kiln_dtype dtype) {
  return kiln_test_model_on(ctx, text, device, dtype);
}

static kiln_model *model_from(kiln_context *ctx, const char *text, kiln_dtype dtype) {
  return model_on(ctx, text, dev, dtype);
}

static int64_t param_numel(kiln_model *model, int64_t i) {
  kiln_tensor *p = NULL;
  int64_t n = 0;
  assert_kiln_ok(kiln_model_parameter(model, i, &p));
  assert_kiln_ok(kiln_tensor_numel(p, &n));
  kiln_tensor_release(p);
  return n;
}

static void read_param(kiln_model *model, int64_t i, double *out, int64_t n) {
  kiln_tensor *p = NULL;
  assert_kiln_ok(kiln_model_parameter(model, i, &p));
  kiln_test_read_f64(p, out, n);
  kiln_tensor_release(p);
}

/* All parameters, concatenated, as doubles (caller frees). */
static double *read_all_params(kiln_model *model, int64_t *count) {
  int64_t tensors = 0, total = 0;
  assert_kiln_ok(kiln_model_num_parameters(model, &total));
  assert_kiln_ok(kiln_model_num_parameter_tensors(model, &tensors));
  double *all = malloc((size_t)total * sizeof *all);
  int64_t at = 0;
  for (int64_t i = 0; i < tensors; ++i) {
    int64_t n = param_numel(model, i);
    read_param(model, i, all + at, n);
    at += n;
  }
  assert_int_equal(at, total);
  *count = total;
  return all;
}

static void assert_describe(kiln_context *ctx, const char *text, const char *want) {
  kiln_model *model = model_from(ctx, text, KILN_F32);
  const char *got = NULL;
  assert_kiln_ok(kiln_model_describe(model, &got));
  assert_string_equal(got, want);
  /* describe() reads back as the same architecture. */
  kiln_model *again = model_from(ctx, got, KILN_F32);
  const char *got2 = NULL;
  assert_kiln_ok(kiln_model_describe(again, &got2));
  assert_string_equal(got2, want);
  kiln_model_release(again);
  kiln_model_release(model);
}

/* ---- specs -------------------------------------------------------------- */

static void test_spec_parse_and_describe(void **state) {
  CPU_HALF_ONLY();
  kiln_context *ctx = *state;
  assert_describe(ctx, "784-32-10", "784-32-10");
  assert_describe(ctx, " 784-32-10:relu ", "784-32-10");
  assert_describe(ctx, "784-256-10:gelu", "784-256-10:gelu");
  assert_describe(ctx, "784-256-10:relu:dropout=0.2", "784-256-10:dropout=0.2");
  assert_describe(ctx, "8-4-2:leaky_relu=0.1:dropout=0.5", "8-4-2:leaky_relu=0.1:dropout=0.5");
  assert_describe(ctx, "8-4-2:leaky_relu", "8-4-2:leaky_relu");
  assert_describe(ctx, "8-2", "8-2");
  assert_describe(ctx, "linear(4,3,nobias);tanh;linear(3,2);sigmoid", "linear(4,3,nobias);tanh;linear(3,2);sigmoid");
  assert_describe(ctx, "relu ; linear(4, 3) ; dropout(0.25)", "relu;linear(4,3);dropout(0.25)");
  assert_describe(ctx, "linear(4,3);relu;linear(3,3);tanh;linear(3,2)", "linear(4,3);relu;linear(3,3);tanh;linear(3,2)");
  /* flatten (nn.Flatten): compact when it comes first, else in the list. */
  assert_describe(ctx, "784-32-10:flatten", "784-32-10:flatten");
  assert_describe(ctx, "784-32-10:flatten:gelu:dropout=0.1", "784-32-10:gelu:dropout=0.1:flatten");
  assert_describe(ctx, "flatten;linear(784,32);relu;linear(32,10)", "784-32-10:flatten");
  assert_describe(ctx, "8-2:flatten", "8-2:flatten");
  assert_describe(ctx, "linear(4,3);flatten;relu;linear(3,2)", "linear(4,3);flatten;relu;linear(3,2)");
  assert_describe(ctx, "flatten;flatten;linear(4,3);relu;linear(3,2);flatten", "flatten;flatten;linear(4,3);relu;linear(3,2);flatten");
  /* ELU, SELU, Softplus: their parameters written only where they are not
   * PyTorch's defaults in the compact form, always in the layer list. */
  assert_describe(ctx, "8-4-2:elu", "8-4-2:elu");
  assert_describe(ctx, "8-4-2:elu=1", "8-4-2:elu");
  assert_describe(ctx, "8-4-2:elu=0.5", "8-4-2:elu=0.5");
  assert_describe(ctx, "8-4-2:selu:dropout=0.1", "8-4-2:selu:dropout=0.1");
  assert_describe(ctx, "8-4-2:softplus", "8-4-2:softplus");
  assert_describe(ctx, "8-4-2:softplus=2", "8-4-2:softplus=2");
  assert_describe(ctx, "8-4-2:softplus=1,5", "8-4-2:softplus=1,5");
  assert_describe(ctx, "linear(8,4);elu;linear(4,2)", "8-4-2:elu");
  assert_describe(ctx, "linear(8,4);softplus(2,10);linear(4,2)", "8-4-2:softplus=2,10");
  assert_describe(ctx, "linear(8,4,nobias);elu(0.3);selu;softplus(0.5);linear(4,2)",
                  "linear(8,4,nobias);elu(0.3);selu;softplus(0.5,20);linear(4,2)");
  /* Output transforms: last, compact when the rest is. */
  assert_describe(ctx, "784-32-10:softmax", "784-32-10:softmax");
  assert_describe(ctx, "784-32-10:log_softmax:flatten:gelu", "784-32-10:gelu:flatten:log_softmax");
  assert_describe(ctx, "flatten;linear(784,32);relu;linear(32,10);log_softmax", "784-32-10:flatten:log_softmax");
  assert_describe(ctx, "linear(4,3,nobias);tanh;linear(3,2);softmax", "linear(4,3,nobias);tanh;linear(3,2);softmax");
  assert_describe(ctx, "8-2:softmax", "8-2:softmax");
  /* Models without a Linear declare their input; with one it is redundant. */
  assert_describe(ctx, "input(6);elu(2)", "input(6);elu(2)");
  assert_describe(ctx, "input(6);softplus;dropout(0.5);log_softmax", "input(6);softplus(1,20);dropout(0.5);log_softmax");
  assert_describe(ctx, "input(6)", "input(6)");
  assert_describe(ctx, "input(8);linear(8,4);relu;linear(4,2)", "8-4-2");
}

/* A Flatten takes an nn.Sequential index, so the parameters after it are
 * named as PyTorch names them, and it computes nothing: the logits are those
 * of the same model without it, for [N, 4] rows as for [N, 1, 2, 2] images. */
static void test_spec_flatten(void **state) {
  CPU_HALF_ONLY();
  kiln_context *ctx = *state;
  kiln_model *plain = model_from(ctx, "4-3-2", KILN_F32), *flat = model_from(ctx, "4-3-2:flatten", KILN_F32);
  static const char *const names[] = {"1.weight", "1.bias", "3.weight", "3.bias"};
  for (int64_t i = 0; i < 4; ++i) {
    const char *name = NULL;
    kiln_tensor *from = NULL, *to = NULL;
    assert_kiln_ok(kiln_model_parameter_name(flat, i, &name));
    assert_string_equal(name, names[i]);
    assert_kiln_ok(kiln_model_parameter(plain, i, &from));
    assert_kiln_ok(kiln_model_parameter(flat, i, &to));
    float values[12];
    int64_t bytes = 0;
    assert_kiln_ok(kiln_tensor_numel(from, &bytes));
    bytes *= (int64_t)sizeof(float);
    assert_kiln_ok(kiln_tensor_copy_to_host(from, values, bytes));
    assert_kiln_ok(kiln_tensor_copy_from_host(to, values, bytes));
    kiln_tensor_release(to);
    kiln_tensor_release(from);
  }
  const float xs[8] = {0.5f, -1, 2, 0.25f, -0.75f, 1.5f, 0.125f, -2};
  const int64_t rows[2] = {2, 4}, images[4] = {2, 1, 2, 2};
  kiln_tensor *x = kiln_test_tensor_f32(ctx, xs, rows, 2, cpu), *img = kiln_test_tensor_f32(ctx, xs, images, 4, cpu);
  kiln_tensor *want = NULL, *got = NULL, *got_img = NULL;
  assert_kiln_ok(kiln_model_predict(plain, x, KILN_PREDICT_LOGITS, &want));
  assert_kiln_ok(kiln_model_predict(flat, x, KILN_PREDICT_LOGITS, &got));
  assert_kiln_ok(kiln_model_predict(flat, img, KILN_PREDICT_LOGITS, &got_img));
  double w[4];
  kiln_test_read_f64(want, w, 4);
  assert_tensor_close(got, w, 4, 0, 0);
  assert_tensor_close(got_img, w, 4, 0, 0);
  kiln_tensor_release(got_img);
  kiln_tensor_release(got);
  kiln_tensor_release(want);
  kiln_tensor_release(img);
  kiln_tensor_release(x);
  /* A spec of flattens alone has no Linear. */
  kiln_model_spec *only = NULL;
  kiln_model *none = (kiln_model *)(uintptr_t)1;
  assert_kiln_ok(kiln_model_spec_create(&only));
  assert_kiln_ok(kiln_model_spec_parse(only, "flatten"));
  assert_status(kiln_model_create(ctx, only, cpu, &none), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(none);
  kiln_model_spec_release(only);
  kiln_model_release(flat);
  kiln_model_release(plain);
}

static void test_spec_builders(void **state) {
  CPU_HALF_ONLY();
  kiln_context *ctx = *state;
  kiln_model_spec *spec = NULL;
  assert_kiln_ok(kiln_model_spec_create(&spec));
  const int64_t sizes[] = {6, 5, 4, 3};
  assert_kiln_ok(kiln_model_spec_add_mlp(spec, sizes, 4, KILN_LAYER_TANH));
  assert_kiln_ok(kiln_model_spec_add(spec, KILN_LAYER_DROPOUT, 0.3));
  assert_kiln_ok(kiln_model_spec_add_linear(spec, 3, 2, 0));
  kiln_model *model = NULL;
  assert_kiln_ok(kiln_model_create(ctx, spec, cpu, &model));
  const char *text = NULL;
  assert_kiln_ok(kiln_model_describe(model, &text));
  assert_string_equal(text, "linear(6,5);tanh;linear(5,4);tanh;linear(4,3);dropout(0.3);linear(3,2,nobias)");
  int64_t in = 0, out = 0, tensors = 0;
  assert_kiln_ok(kiln_model_input_size(model, &in));
  assert_kiln_ok(kiln_model_output_size(model, &out));
  assert_kiln_ok(kiln_model_num_parameter_tensors(model, &tensors));
  assert_int_equal(in, 6);
  assert_int_equal(out, 2);
  assert_int_equal(tensors, 7);
  const char *name = NULL;
  assert_kiln_ok(kiln_model_parameter_name(model, 6, &name));
  assert_string_equal(name, "6.weight"); /* the Sequential index of the last Linear */
  kiln_model_release(model);
  kiln_model_spec_release(spec);
}

static void test_spec_errors(void **state) {
  CPU_HALF_ONLY();
  kiln_context *ctx = *state;
  kiln_model_spec *spec = NULL;
  assert_kiln_ok(kiln_model_spec_create(&spec));
  kiln_model *model = (kiln_model *)(uintptr_t)1;
  /* An empty spec makes no model. */
  assert_status(kiln_model_create(ctx, spec, cpu, &model), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(model);
  assert_last_error_contains("empty");

  assert_kiln_ok(kiln_model_spec_add_linear(spec, 784, 32, 1));
  assert_status(kiln_model_spec_add_linear(spec, 64, 10, 1), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("in_features must be 32");
  assert_status(kiln_model_spec_add_linear(spec, 32, 0, 1), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("out_features 0");
  assert_status(kiln_model_spec_add(spec, KILN_LAYER_DROPOUT, 1.0), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("[0, 1)");
  assert_status(kiln_model_spec_add(spec, KILN_LAYER_DROPOUT, -0.1), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_model_spec_add(spec, KILN_LAYER_LINEAR, 0), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_model_spec_add(spec, (kiln_layer_kind)42, 0), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_model_spec_add(spec, KILN_LAYER_LEAKY_RELU, NAN), KILN_ERROR_INVALID_ARGUMENT);
  const int64_t one[] = {3};
  assert_status(kiln_model_spec_add_mlp(spec, one, 1, KILN_LAYER_RELU), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_model_spec_add_mlp(spec, NULL, 2, KILN_LAYER_RELU), KILN_ERROR_INVALID_ARGUMENT);
  const int64_t two[] = {32, 8};
  assert_status(kiln_model_spec_add_mlp(spec, two, 2, KILN_LAYER_DROPOUT), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_model_spec_add_mlp(spec, two, 2, KILN_LAYER_SOFTMAX), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_model_spec_add(spec, KILN_LAYER_ELU, INFINITY), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("ELU alpha must be finite");
  assert_status(kiln_model_spec_add(spec, KILN_LAYER_SOFTPLUS, 0), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("Softplus beta must be finite and not 0");
  assert_status(kiln_model_spec_add_v2(spec, KILN_LAYER_SOFTPLUS, 1, NAN), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("Softplus threshold must be finite");
  assert_status(kiln_model_spec_add_v2(NULL, KILN_LAYER_SOFTPLUS, 1, 20), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_model_spec_add_v2(spec, (kiln_layer_kind)12, 1, 20), KILN_ERROR_INVALID_ARGUMENT);

  static const char *bad[] = {"", "784", "784-x-10", "784--10", "784-0-10", "784-32-10:swish", "784-32-10:dropout=1",
                              "784-32-10:dropout=-0.5", "784-32-10:dropout", "784-32-10:relu:gelu",
                              "linear(3)", "linear(3,2", "conv(3,3)", "relu(2)", "linear(3,2,bias)", "dropout(2)",
                              "784-32-10:flatten=1", "784-32-10:flatten:flatten", "flatten(1);linear(3,2)",
                              "784-32-10:selu=1", "784-32-10:elu=", "784-32-10:elu=1,2", "784-32-10:softplus=1,2,3",
                              "784-32-10:softplus=0", "784-32-10:elu:selu", "784-32-10:softmax:log_softmax",
                              "784-32-10:softmax=1", "elu(1,2)", "softplus(1,nan)", "selu(1)", "softmax(1)",
                              "linear(4,3);softmax;relu", "linear(4,3);log_softmax;linear(3,2)",
                              "linear(4,3);softmax;flatten", "relu;input(4)", "input(4);input(4)", "input(0);relu",
                              "input(4,2)", "input"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    kiln_model_spec *s = NULL;
    assert_kiln_ok(kiln_model_spec_create(&s));
    assert_status(kiln_model_spec_parse(s, bad[i]), KILN_ERROR_INVALID_ARGUMENT);
    assert_last_error_contains("model spec");
    kiln_model_spec_release(s);
  }
  /* A failed parse appends nothing: the spec still ends at 32 features. */
  assert_status(kiln_model_spec_parse(spec, "linear(32,16);relu;linear(8,2)"), KILN_ERROR_SHAPE_MISMATCH);
  assert_status(kiln_model_spec_parse(spec, "relu;linear(32,10);foo"), KILN_ERROR_INVALID_ARGUMENT);
  assert_kiln_ok(kiln_model_spec_parse(spec, "relu;linear(32,10)"));
  assert_kiln_ok(kiln_model_create(ctx, spec, cpu, &model));
  const char *text = NULL;
  assert_kiln_ok(kiln_model_describe(model, &text));
  assert_string_equal(text, "784-32-10");
  kiln_model_release(model);

  assert_status(kiln_model_spec_parse(spec, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_model_spec_parse(NULL, "3-2"), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_model_spec_create(NULL), KILN_ERROR_INVALID_ARGUMENT);
  /* Nothing follows an output transform, whichever call adds it. */
  assert_kiln_ok(kiln_model_spec_add(spec, KILN_LAYER_SOFTMAX, 0));
  assert_status(kiln_model_spec_add(spec, KILN_LAYER_RELU, 0), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("no layer may follow softmax");
  assert_status(kiln_model_spec_add_linear(spec, 10, 2, 1), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_model_spec_parse(spec, "relu"), KILN_ERROR_INVALID_ARGUMENT);
  /* An input that does not fit the first Linear. */
  kiln_model_spec *in = spec_from("input(5)");
  assert_status(kiln_model_spec_add_linear(in, 4, 2, 1), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("cannot follow an input of 5 features");
  kiln_model_spec_release(in);
  /* ... or the Linear before it, through an activation. */
  kiln_model_spec *after = spec_from("linear(6,3);relu");
  assert_status(kiln_model_spec_add_linear(after, 4, 2, 1), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("Linear(4, 2) cannot follow a Linear with 3 outputs: in_features must be 3");
  assert_kiln_ok(kiln_model_spec_add_linear(after, 3, 2, 1));
  kiln_model_spec_release(after);
  /* Bad dtypes and devices. */
  assert_status(kiln_model_create_dtype(ctx, spec, cpu, KILN_F16, &model), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(model);
  assert_status(kiln_model_create_dtype(ctx, spec, cpu, (kiln_dtype)77, &model), KILN_ERROR_INVALID_ARGUMENT);
  kiln_device bogus = {(kiln_device_kind)5, 0};
  assert_status(kiln_model_create(ctx, spec, bogus, &model), KILN_ERROR_INVALID_ARGUMENT);
  kiln_model_spec_release(spec);
  kiln_model_spec_release(NULL);
}

/* ---- parameters and initialisation --------------------------------------- */

static void test_parameters_and_names(void **state) {
  kiln_context *ctx = *state;
  kiln_model *model = model_from(ctx, "784-32-10", KILN_F32);
  int64_t n = 0, tensors = 0;
  assert_kiln_ok(kiln_model_num_parameters(model, &n));
  assert_int_equal(n, 25450); /* 784*32 + 32 + 32*10 + 10 */
  assert_kiln_ok(kiln_model_num_parameter_tensors(model, &tensors));
  assert_int_equal(tensors, 4);
  static const char *names[] = {"0.weight", "0.bias", "2.weight", "2.bias"};
  static const int64_t shapes[][2] = {{32, 784}, {32, 0}, {10, 32}, {10, 0}};
  for (int64_t i = 0; i < 4; ++i) {
    const char *name = NULL;
    assert_kiln_ok(kiln_model_parameter_name(model, i, &name));
    assert_string_equal(name, names[i]);
    kiln_tensor *p = NULL;
    int64_t ndim = 0, shape[2] = {0, 0};
    kiln_dtype dtype;
    assert_kiln_ok(kiln_model_parameter(model, i, &p));
    assert_kiln_ok(kiln_tensor_ndim(p, &ndim));
    assert_int_equal(ndim, shapes[i][1] ? 2 : 1);
    assert_kiln_ok(kiln_tensor_shape(p, shape, 2));
    assert_int_equal(shape[0], shapes[i][0]);
    if (ndim == 2) assert_int_equal(shape[1], shapes[i][1]);
    assert_kiln_ok(kiln_tensor_dtype(p, &dtype));
    assert_int_equal(dtype, KILN_F32);
    kiln_tensor_release(p);
  }
  kiln_tensor *p = (kiln_tensor *)(uintptr_t)1;
  const char *name = "x";
  assert_status(kiln_model_parameter(model, 4, &p), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(p);
  assert_last_error_contains("4 parameter tensors");
  assert_status(kiln_model_parameter_name(model, -1, &name), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(name);

  /* A view writes through to the model: zero weights give bias-only logits. */
  kiln_tensor *w = NULL;
  assert_kiln_ok(kiln_model_parameter(model, 2, &w));
  double zeros[320] = {0};
  float zf[320] = {0};
  assert_kiln_ok(kiln_tensor_copy_from_host(w, zf, sizeof zf));
  kiln_tensor *again = NULL;
  assert_kiln_ok(kiln_model_parameter(model, 2, &again));
  assert_tensor_close(again, zeros, 320, 0, 0);
  kiln_tensor_release(again);
  kiln_tensor_release(w);
  kiln_model_release(model);
}

/* nn.Linear's init: weight and bias uniform in +-1/sqrt(in); checked by
 * range, mean and variance (b^2/3) on a large layer with a fixed seed. */
static void test_init_statistics(void **state) {
  (void)state;
  kiln_context *ctx = kiln_test_context_create(1234);
  kiln_model *model = model_from(ctx, "400-300-10", KILN_F32);
  const double bound = 1.0 / sqrt(400.0);
  const int64_t n = 300 * 400;
  double *w = malloc((size_t)n * sizeof *w);
  read_param(model, 0, w, n);
  double sum = 0, sq = 0, lo = 1, hi = -1;
  for (int64_t i = 0; i < n; ++i) {
    sum += w[i];
    sq += w[i] * w[i];
    if (w[i] < lo) lo = w[i];
    if (w[i] > hi) hi = w[i];
  }
  const double mean = sum / (double)n, var = sq / (double)n - mean * mean;
  const double sd_of_mean = bound / sqrt(3.0) / sqrt((double)n);
  assert_true(lo >= -bound && hi <= bound);
  assert_true(lo < -0.999 * bound && hi > 0.999 * bound);
  assert_true(fabs(mean) < 5 * sd_of_mean);
  assert_true(fabs(var / (bound * bound / 3.0) - 1.0) < 0.02);
  double b[300];
  read_param(model, 1, b, 300);
  for (int i = 0; i < 300; ++i) assert_true(fabs(b[i]) <= bound);
  double b2[10];
  read_param(model, 3, b2, 10);
  for (int i = 0; i < 10; ++i) assert_true(fabs(b2[i]) <= 1.0 / sqrt(300.0));

  /* Same seed, same weights; the next model draws new ones. */
  kiln_context *ctx2 = kiln_test_context_create(1234);
  kiln_model *twin = model_from(ctx2, "400-300-10", KILN_F32);
  kiln_model *next = model_from(ctx2, "400-300-10", KILN_F32);
  double *w2 = malloc((size_t)n * sizeof *w2);
  read_param(twin, 0, w2, n);
  assert_memory_equal(w, w2, (size_t)n * sizeof *w);
  read_param(next, 0, w2, n);
  assert_true(memcmp(w, w2, (size_t)n * sizeof *w) != 0);
  free(w);
  free(w2);
  kiln_model_release(next);
  kiln_model_release(twin);
  kiln_model_release(model);
  kiln_context_release(ctx2);
  kiln_context_release(ctx);
}

/* ---- forward ------------------------------------------------------------- */

static double act_ref(int kind, double v) {
  switch (kind) {
    case KILN_LAYER_RELU: return v > 0 ? v : 0;
    case KILN_LAYER_LEAKY_RELU: return v > 0 ? v : 0.1 * v;
    case KILN_LAYER_GELU: return 0.5 * v * (1 + erf(v / sqrt(2.0)));
    case KILN_LAYER_TANH: return tanh(v);
    case KILN_LAYER_SIGMOID: return 1 / (1 + exp(-v));
  }
  return v;
}

/* Model "linear(5,7);gelu;linear(7,6,nobias);leaky_relu(0.1);linear(6,4);
 * tanh;sigmoid;linear(4,3)" in float64 on the host. */
static void forward_ref(kiln_model *model, const double *x, int64_t rows, double *out) {
  static const int64_t dims[][2] = {{5, 7}, {7, 6}, {6, 4}, {4, 3}};
  static const int has_bias[] = {1, 0, 1, 1};
  static const int acts[][2] = {{KILN_LAYER_GELU, -1}, {KILN_LAYER_LEAKY_RELU, -1},
                                {KILN_LAYER_TANH, KILN_LAYER_SIGMOID}, {-1, -1}};
  double cur[8][8], next[8][8], w[64], b[8];
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < 5; ++j) cur[r][j] = x[r * 5 + j];
  int64_t p = 0;
  for (int l = 0; l < 4; ++l) {
    const int64_t in = dims[l][0], outf = dims[l][1];
    read_param(model, p++, w, outf * in);
    if (has_bias[l]) read_param(model, p++, b, outf);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < outf; ++o) {
        double s = has_bias[l] ? b[o] : 0;
        for (int64_t i = 0; i < in; ++i) s += cur[r][i] * w[o * in + i];
        for (int a = 0; a < 2; ++a) s = act_ref(acts[l][a], s);
        next[r][o] = s;
      }
    memcpy(cur, next, sizeof cur);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int o = 0; o < 3; ++o) out[r * 3 + o] = cur[r][o];
}

static void test_forward_matches_reference(void **state) {
  kiln_context *ctx = *state;
  const char *spec = "linear(5,7);gelu;linear(7,6,nobias);leaky_relu(0.1);linear(6,4);tanh;sigmoid;linear(4,3)";
  kiln_test_rng rng = kiln_test_rng_make(7);
  double xd[6 * 5], want[6 * 3];
  float xf[6 * 5];
  for (int i = 0; i < 30; ++i) xf[i] = (float)(xd[i] = (float)kiln_test_rng_uniform(&rng, -2, 2));
  const int64_t shape[] = {6, 5};
  for (int dt = 0; dt < model_dtypes(); ++dt) {
    kiln_dtype dtype = dt ? KILN_F64 : KILN_F32;
    kiln_model *model = model_from(ctx, spec, dtype);
    forward_ref(model, xd, 6, want);
    /* f32 input into either model (converted), and f64 input. */
    kiln_tensor *x32 = kiln_test_tensor_f32(ctx, xf, shape, 2, dev), *x64 = kiln_test_tensor_f64(ctx, xd, shape, 2, dev);
    kiln_tensor *y = NULL;
    const double tol = dt ? 1e-12 : 2e-6;
    assert_kiln_ok(kiln_model_forward(model, x32, &y));
    assert_tensor_close(y, want, 18, tol, tol);
    kiln_dtype out_dtype;
    assert_kiln_ok(kiln_tensor_dtype(y, &out_dtype));
    assert_int_equal(out_dtype, dtype);
    kiln_tensor_release(y);
    assert_kiln_ok(kiln_model_forward(model, x64, &y));
    assert_tensor_close(y, want, 18, tol, tol);
    kiln_tensor_release(y);
    /* [batch, 1, 5] has 5 features per row too. */
    const int64_t shape3[] = {6, 1, 5};
    kiln_tensor *x3 = kiln_test_tensor_f64(ctx, xd, shape3, 3, dev);
    assert_kiln_ok(kiln_model_forward(model, x3, &y));
    assert_tensor_close(y, want, 18, tol, tol);
    kiln_tensor_release(y);
    kiln_tensor_release(x3);
    kiln_tensor_release(x32);
    kiln_tensor_release(x64);
    kiln_model_release(model);
  }
}

static void test_forward_errors(void **state) {
  kiln_context *ctx = *state;
  kiln_model *model = model_from(ctx, "5-3", KILN_F32);
  kiln_tensor *y = (kiln_tensor *)(uintptr_t)1, *x = NULL;
  const int64_t wrong[] = {4, 6};
  assert_kiln_ok(kiln_tensor_zeros(ctx, wrong, 2, KILN_F32, dev, &x));
  assert_status(kiln_model_forward(model, x, &y), KILN_ERROR_SHAPE_MISMATCH);
  assert_null(y);
  assert_last_error_contains("[4, 6]");
  kiln_tensor_release(x);
  const int64_t good[] = {4, 5};
  assert_kiln_ok(kiln_tensor_zeros(ctx, good, 2, KILN_I32, dev, &x));
  assert_status(kiln_model_forward(model, x, &y), KILN_ERROR_DTYPE_MISMATCH);
  assert_status(kiln_model_predict(model, x, (kiln_predict_kind)9, &y), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(x);
  assert_status(kiln_model_forward(model, NULL, &y), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_model_forward(NULL, NULL, &y), KILN_ERROR_INVALID_ARGUMENT);
  /* An empty batch gives an empty result. */
  const int64_t none[] = {0, 5};
  assert_kiln_ok(kiln_tensor_zeros(ctx, none, 2, KILN_F32, dev, &x));
  assert_kiln_ok(kiln_model_forward(model, x, &y));
  int64_t shape[2];
  assert_kiln_ok(kiln_tensor_shape(y, shape, 2));
  assert_int_equal(shape[0], 0);
  assert_int_equal(shape[1], 3);
  kiln_tensor_release(y);
  kiln_tensor_release(x);
  kiln_model_release(model);
}

/* A layer of mlp_ref: a Linear (in, out, bias) or an activation. */
typedef struct {
  int kind;
  int64_t in, out;
  int bias;
  double arg, arg2;
} ref_layer;

/* One activation in float64, from PyTorch's definitions. */
static double activation_ref(const ref_layer *l, double v) {
  switch (l->kind) {
    case KILN_LAYER_ELU: return v > 0 ? v : l->arg * (exp(v) - 1);
    case KILN_LAYER_SELU: return 1.0507009873554804934 * (v > 0 ? v : 1.6732632423543772848 * (exp(v) - 1));
    case KILN_LAYER_SOFTPLUS: return l->arg * v > l->arg2 ? v : log1p(exp(l->arg * v)) / l->arg;
    default: return act_ref(l->kind, v);
  }
}

/* The rows of a model of `layers` (its parameters read from model) in
 * float64, at most 8 wide. */
static void mlp_ref(kiln_model *model, const ref_layer *layers, int n, const double *x, int64_t rows, int64_t in,
                    double *out, int64_t *width) {
  double cur[8][8], w[64], b[8];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < in; ++j) cur[r][j] = x[r * in + j];
  int64_t p = 0, features = in;
  for (int l = 0; l < n; ++l) {
    const ref_layer *L = &layers[l];
    if (L->kind != KILN_LAYER_LINEAR) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < features; ++j) cur[r][j] = activation_ref(L, cur[r][j]);
      continue;
    }
    read_param(model, p++, w, L->out * L->in);
    if (L->bias) read_param(model, p++, b, L->out);
    double next[8][8];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < L->out; ++o) {
        double s = L->bias ? b[o] : 0;
        for (int64_t i = 0; i < L->in; ++i) s += cur[r][i] * w[o * L->in + i];
        next[r][o] = s;
      }
    memcpy(cur, next, sizeof cur);
    features = L->out;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < features; ++j) out[r * features + j] = cur[r][j];
  *width = features;
}

/* ELU, SELU and Softplus, fused after a Linear and alone, against float64. */
static void test_forward_new_activations(void **state) {
  kiln_context *ctx = *state;
  const char *spec = "linear(5,7);elu(0.5);linear(7,6,nobias);selu;linear(6,4);softplus(2,1.5);linear(4,3);"
                     "elu(-0.3);softplus;selu";
  static const ref_layer layers[] = {{KILN_LAYER_LINEAR, 5, 7, 1, 0, 0}, {KILN_LAYER_ELU, 0, 0, 0, 0.5, 0},
                                     {KILN_LAYER_LINEAR, 7, 6, 0, 0, 0}, {KILN_LAYER_SELU, 0, 0, 0, 0, 0},
                                     {KILN_LAYER_LINEAR, 6, 4, 1, 0, 0}, {KILN_LAYER_SOFTPLUS, 0, 0, 0, 2, 1.5},
                                     {KILN_LAYER_LINEAR, 4, 3, 1, 0, 0}, {KILN_LAYER_ELU, 0, 0, 0, -0.3, 0},
                                     {KILN_LAYER_SOFTPLUS, 0, 0, 0, 1, 20},  {KILN_LAYER_SELU, 0, 0, 0, 0, 0}};
  kiln_test_rng rng = kiln_test_rng_make(8);
  double xd[6 * 5], want[6 * 3];
  for (int i = 0; i < 30; ++i) xd[i] = (float)kiln_test_rng_uniform(&rng, -3, 3);
  const int64_t shape[] = {6, 5};
  for (int dt = 0; dt < model_dtypes(); ++dt) {
    kiln_model *model = model_from(ctx, spec, dt ? KILN_F64 : KILN_F32);
    int64_t width = 0;
    mlp_ref(model, layers, 10, xd, 6, 5, want, &width);
    assert_int_equal(width, 3);
    kiln_tensor *x = kiln_test_tensor_f64(ctx, xd, shape, 2, dev), *y = NULL;
    const double tol = dt ? 1e-12 : 2e-6;
    assert_kiln_ok(kiln_model_forward(model, x, &y));
    assert_tensor_close(y, want, 18, tol, tol);
    kiln_tensor_release(y);
    assert_kiln_ok(kiln_model_predict(model, x, KILN_PREDICT_LOGITS, &y));
    assert_tensor_close(y, want, 18, tol, tol);
    kiln_tensor_release(y);
    kiln_tensor_release(x);
    kiln_model_release(model);
  }
}

/* softmax (log: log_softmax) of each row of in [rows, n]. */
static void softmax_rows(const double *in, int64_t rows, int64_t n, int log_form, double *out) {
  for (int64_t r = 0; r < rows; ++r) {
    double mx = in[r * n], z = 0;
    for (int64_t j = 1; j < n; ++j) mx = fmax(mx, in[r * n + j]);
    for (int64_t j = 0; j < n; ++j) z += exp(in[r * n + j] - mx);
    for (int64_t j = 0; j < n; ++j)
      out[r * n + j] = log_form ? in[r * n + j] - mx - log(z) : exp(in[r * n + j] - mx) / z;
  }
}

/* An output transform: forward and predict(LOGITS) give its rows, in
 * evaluation and (with Dropout) training mode; PROBABILITIES and CLASSES
 * read the logits under it. */
static void test_output_transform(void **state) {
  kiln_context *ctx = *state;
  static const ref_layer layers[] = {{KILN_LAYER_LINEAR, 4, 8, 1, 0, 0}, {KILN_LAYER_TANH, 0, 0, 0, 0, 0},
                                     {KILN_LAYER_LINEAR, 8, 5, 1, 0, 0}};
  kiln_test_rng rng = kiln_test_rng_make(5);
  double xd[7 * 4];
  kiln_test_fill_uniform_f64(&rng, xd, 28, -3, 3);
  const int64_t shape[] = {7, 4};
  for (int log_form = 0; log_form < 2; ++log_form) {
    kiln_model *model = model_from(ctx, log_form ? "4-8-5:tanh:dropout=0.5:log_softmax" : "4-8-5:tanh:softmax",
                                   gpu_run ? KILN_F32 : KILN_F64);
    double logits[35], transformed[35], probs[35], got[35];
    int64_t width = 0;
    mlp_ref(model, layers, 3, xd, 7, 4, logits, &width);
    softmax_rows(logits, 7, 5, log_form, transformed);
    softmax_rows(logits, 7, 5, 0, probs);
    const double tol = gpu_run ? 2e-6 : 1e-12;
    kiln_tensor *x = kiln_test_tensor_f64(ctx, xd, shape, 2, dev), *y = NULL;
    assert_kiln_ok(kiln_model_predict(model, x, KILN_PREDICT_LOGITS, &y));
    assert_tensor_close(y, transformed, 35, tol, tol);
    kiln_tensor_release(y);
    assert_kiln_ok(kiln_model_predict(model, x, KILN_PREDICT_PROBABILITIES, &y));
    assert_tensor_close(y, probs, 35, tol, tol);
    kiln_tensor_release(y);
    assert_kiln_ok(kiln_model_predict(model, x, KILN_PREDICT_CLASSES, &y));
    kiln_test_read_f64(y, got, 7);
    for (int r = 0; r < 7; ++r) {
      int arg = 0;
      for (int j = 1; j < 5; ++j)
        if (logits[r * 5 + j] > logits[r * 5 + arg]) arg = j;
      assert_int_equal((int)got[r], arg);
    }
    kiln_tensor_release(y);
    assert_kiln_ok(kiln_model_set_training(model, 0));
    assert_kiln_ok(kiln_model_forward(model, x, &y));
    assert_tensor_close(y, transformed, 35, tol, tol);
    kiln_tensor_release(y);
    if (log_form) {  /* training mode with its Dropout: still log-probabilities */
      assert_kiln_ok(kiln_model_set_training(model, 1));
      assert_kiln_ok(kiln_model_forward(model, x, &y));
      kiln_test_read_f64(y, got, 35);
      for (int r = 0; r < 7; ++r) {
        double total = 0;
        for (int j = 0; j < 5; ++j) total += exp(got[r * 5 + j]);
        assert_allclose(&total, &(double){1.0}, 1, tol * 10, tol * 10);
      }
      kiln_tensor_release(y);
    }
    kiln_tensor_release(x);
    kiln_model_release(model);
  }
}

/* A model without a Linear: its declared input, no parameters, a forward
 * pass of its activations, and its file. */
static void test_model_without_linear(void **state) {
  kiln_context *ctx = *state;
  kiln_model *model = model_from(ctx, "input(6);elu(0.5);softmax", KILN_F32);
  int64_t n = -1, in = 0, out = 0;
  assert_kiln_ok(kiln_model_num_parameters(model, &n));
  assert_int_equal(n, 0);
  assert_kiln_ok(kiln_model_num_parameter_tensors(model, &n));
  assert_int_equal(n, 0);
  assert_kiln_ok(kiln_model_input_size(model, &in));
  assert_kiln_ok(kiln_model_output_size(model, &out));
  assert_int_equal(in, 6);
  assert_int_equal(out, 6);
  kiln_tensor *p = (kiln_tensor *)(uintptr_t)1;
  assert_status(kiln_model_parameter(model, 0, &p), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(p);
  /* [3, 2, 3] is 6 features a sample. */
  kiln_test_rng rng = kiln_test_rng_make(6);
  double xd[18], elu[18], want[18];
  kiln_test_fill_uniform_f64(&rng, xd, 18, -2, 2);
  for (int i = 0; i < 18; ++i) xd[i] = (float)xd[i], elu[i] = xd[i] > 0 ? xd[i] : 0.5 * (exp(xd[i]) - 1);
  softmax_rows(elu, 3, 6, 0, want);
  const int64_t shape[] = {3, 2, 3};
  kiln_tensor *x = kiln_test_tensor_f64(ctx, xd, shape, 3, dev), *y = NULL;
  assert_kiln_ok(kiln_model_forward(model, x, &y));
  assert_tensor_close(y, want, 18, 1e-6, 1e-7);
  kiln_tensor_release(y);
  /* Without a layer at all: the input, copied. */
  kiln_model *identity = model_from(ctx, "input(6)", KILN_F32);
  assert_kiln_ok(kiln_model_predict(identity, x, KILN_PREDICT_LOGITS, &y));
  assert_tensor_close(y, xd, 18, 0, 0);
  kiln_tensor_release(y);
  kiln_model_release(identity);
  /* Saved and loaded: the same spec, the same outputs. */
  char dir[512], path[600];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/none.safetensors", dir);
  assert_kiln_ok(kiln_model_save(model, path));
  kiln_model *loaded = NULL;
  assert_kiln_ok(kiln_model_load(ctx, path, dev, &loaded));
  const char *text = NULL;
  assert_kiln_ok(kiln_model_describe(loaded, &text));
  assert_string_equal(text, "input(6);elu(0.5);softmax");
  assert_kiln_ok(kiln_model_forward(loaded, x, &y));
  assert_tensor_close(y, want, 18, 1e-6, 1e-7);
  kiln_tensor_release(y);
  kiln_model_release(loaded);
  kiln_test_remove_tree(dir);
  kiln_tensor_release(x);
  kiln_model_release(model);
}

static void test_predict_kinds(void **state) {
  kiln_context *ctx = *state;
  kiln_model *model = model_from(ctx, "4-8-5:tanh:dropout=0.5", KILN_F32);
  kiln_test_rng rng = kiln_test_rng_make(3);
  float xf[7 * 4];
  kiln_test_fill_uniform_f32(&rng, xf, 28, -3, 3);
  const int64_t shape[] = {7, 4};
  kiln_tensor *x = kiln_test_tensor_f32(ctx, xf, shape, 2, dev);
  kiln_tensor *logits = NULL, *probs = NULL, *classes = NULL, *eval = NULL;
  /* predict is evaluation mode even while the model is in training mode. */
  assert_kiln_ok(kiln_model_predict(model, x, KILN_PREDICT_LOGITS, &logits));
  assert_kiln_ok(kiln_model_set_training(model, 0));
  assert_kiln_ok(kiln_model_forward(model, x, &eval));
  double l[35], e[35], p[35], c[7];
  kiln_test_read_f64(logits, l, 35);
  kiln_test_read_f64(eval, e, 35);
  assert_memory_equal(l, e, sizeof l);
  assert_kiln_ok(kiln_model_predict(model, x, KILN_PREDICT_PROBABILITIES, &probs));
  assert_kiln_ok(kiln_model_predict(model, x, KILN_PREDICT_CLASSES, &classes));
  kiln_test_read_f64(probs, p, 35);
  kiln_test_read_f64(classes, c, 7);
  kiln_dtype dt;
  assert_kiln_ok(kiln_tensor_dtype(classes, &dt));
  assert_int_equal(dt, KILN_I64);
  for (int r = 0; r < 7; ++r) {
    double mx = l[r * 5], z = 0;
    int arg = 0;
    for (int j = 1; j < 5; ++j)
      if (l[r * 5 + j] > mx) mx = l[r * 5 + (arg = j)];
    for (int j = 0; j < 5; ++j) z += exp(l[r * 5 + j] - mx);
    double want[5];
    for (int j = 0; j < 5; ++j) want[j] = exp(l[r * 5 + j] - mx) / z;
    assert_allclose(p + r * 5, want, 5, 1e-6, 1e-7);
    assert_int_equal((int)c[r], arg);
  }
  kiln_tensor_release(logits);
  kiln_tensor_release(probs);
  kiln_tensor_release(classes);
  kiln_tensor_release(eval);
  kiln_tensor_release(x);
  kiln_model_release(model);
}

static void test_training_flag_and_device(void **state) {
  kiln_context *ctx = *state;
  kiln_model *model = model_from(ctx, "3-2", KILN_F32);
  int training = -1;
  assert_kiln_ok(kiln_model_is_training(model, &training));
  assert_int_equal(training, 1);
  assert_kiln_ok(kiln_model_set_training(model, 0));
  assert_kiln_ok(kiln_model_is_training(model, &training));
  assert_int_equal(training, 0);
  kiln_device d = {KILN_DEVICE_CUDA, 3};
  assert_kiln_ok(kiln_model_device(model, &d));
  assert_int_equal(d.kind, dev.kind);
  assert_int_equal(d.index, dev.index);
  assert_kiln_ok(kiln_model_to(model, cpu));
  assert_kiln_ok(kiln_model_device(model, &d));
  assert_int_equal(d.kind, KILN_DEVICE_CPU);
  assert_kiln_ok(kiln_model_to(model, dev));
  assert_kiln_ok(kiln_model_device(model, &d));
  assert_int_equal(d.kind, dev.kind);
  kiln_device far = {KILN_DEVICE_CUDA, 99};
  assert_status(kiln_model_to(model, far), KILN_ERROR_DEVICE_UNAVAILABLE);
  kiln_model_release(model);
}

/* ---- files ----------------------------------------------------------------- */

static void test_save_load_round_trip(void **state) {
  kiln_context *ctx = *state;
  char dir[512], path[600];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  static const char *specs[] = {"linear(6,5);gelu;dropout(0.1);linear(5,3,nobias)",
                                 "linear(6,5);softplus(2,3);linear(5,4);elu(0.25);selu;linear(4,3);log_softmax"};
  for (int k = 0; k < 2 * model_dtypes(); ++k) {
    const int dt = k / 2;
    kiln_model *model = model_from(ctx, specs[k % 2], dt ? KILN_F64 : KILN_F32);
    assert_kiln_ok(kiln_model_save(model, path));
    kiln_model *loaded = NULL;
    assert_kiln_ok(kiln_model_load(ctx, path, dev, &loaded));
    const char *a = NULL, *b = NULL;
    assert_kiln_ok(kiln_model_describe(model, &a));
    assert_kiln_ok(kiln_model_describe(loaded, &b));
    assert_string_equal(a, b);
    int64_t na = 0, nb = 0;
    double *pa = read_all_params(model, &na), *pb = read_all_params(loaded, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(pa, pb, (size_t)na * sizeof *pa);
    free(pa);
    free(pb);
    kiln_model_release(loaded);
    kiln_model_release(model);
  }
  kiln_test_remove_tree(dir);
}

static void test_load_weights_checks_first(void **state) {
  kiln_context *ctx = *state;
  char dir[512], path[600], other[600];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/a.safetensors", dir);
  snprintf(other, sizeof other, "%s/b.safetensors", dir);
  kiln_model *a = model_from(ctx, "8-6-4", KILN_F32);
  kiln_model *b = model_from(ctx, "8-5-4", KILN_F32);
  kiln_model *c = model_from(ctx, "8-6-4", KILN_F32);
  assert_kiln_ok(kiln_model_save(b, other));
  int64_t n = 0, m = 0;
  double *before = read_all_params(a, &n);
  assert_status(kiln_model_load_weights(a, other), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("\"0.weight\" has shape [5, 8]");
  assert_last_error_contains("[6, 8]");
  double *after = read_all_params(a, &m);
  assert_memory_equal(before, after, (size_t)n * sizeof *before);
  free(after);
  /* Same architecture: the weights become the file's. */
  assert_kiln_ok(kiln_model_save(c, path));
  assert_kiln_ok(kiln_model_load_weights(a, path));
  double *want = read_all_params(c, &m);
  after = read_all_params(a, &n);
  assert_memory_equal(want, after, (size_t)n * sizeof *want);
  free(want);
  free(after);
  free(before);
  /* An f64 file into an f32 model. */
  kiln_model *d = model_on(ctx, "8-6-4", cpu, KILN_F64); /* f64 models live on the CPU */
  assert_kiln_ok(kiln_model_save(d, other));
  assert_status(kiln_model_load_weights(a, other), KILN_ERROR_DTYPE_MISMATCH);
  kiln_model_release(d);
  kiln_model_release(a);
  kiln_model_release(b);
  kiln_model_release(c);
  kiln_test_remove_tree(dir);
}

static void test_bad_files(void **state) {
  kiln_context *ctx = *state;
  char dir[512], path[600], trunc[600];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/m.safetensors", dir);
  snprintf(trunc, sizeof trunc, "%s/t.safetensors", dir);
  kiln_model *model = model_from(ctx, "16-8-4", KILN_F32);
  assert_kiln_ok(kiln_model_save(model, path));
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  char buf[4096];
  size_t size = fread(buf, 1, sizeof buf, f);
  fclose(f);
  f = fopen(trunc, "wb");
  fwrite(buf, 1, size - 40, f);
  fclose(f);
  kiln_model *loaded = (kiln_model *)(uintptr_t)1;
  assert_status(kiln_model_load(ctx, trunc, dev, &loaded), KILN_ERROR_FORMAT);
  assert_null(loaded);
  assert_status(kiln_model_load_weights(model, trunc), KILN_ERROR_FORMAT);
  snprintf(trunc, sizeof trunc, "%s/missing.safetensors", dir);
  assert_status(kiln_model_load(ctx, trunc, dev, &loaded), KILN_ERROR_IO);
  assert_status(kiln_model_save(model, "/nonexistent-dir/x/y.safetensors"), KILN_ERROR_IO);
  assert_status(kiln_model_load(ctx, NULL, dev, &loaded), KILN_ERROR_INVALID_ARGUMENT);
  kiln_model_release(model);
  kiln_test_remove_tree(dir);
}

static void test_handle_errors(void **state) {
  CPU_HALF_ONLY();
  kiln_context *ctx = *state;
  kiln_model *model = model_from(ctx, "3-2", KILN_F32);
  int64_t n = 7;
  assert_status(kiln_model_num_parameters(NULL, &n), KILN_ERROR_INVALID_ARGUMENT);
  assert_int_equal(n, 0);
  assert_status(kiln_model_num_parameters(model, NULL), KILN_ERROR_INVALID_ARGUMENT);
  /* A handle of another type. */
  assert_status(kiln_model_num_parameters((kiln_model *)ctx, &n), KILN_ERROR_INVALID_HANDLE);
  kiln_model_release(model);
  assert_status(kiln_model_num_parameters(model, &n), KILN_ERROR_INVALID_HANDLE);
  assert_status(kiln_model_set_training(model, 1), KILN_ERROR_INVALID_HANDLE);
  kiln_model_release(model); /* twice: ignored */
  kiln_model_release(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spec_parse_and_describe),
      cmocka_unit_test(test_spec_flatten),
      cmocka_unit_test(test_spec_builders),
      cmocka_unit_test(test_spec_errors),
      cmocka_unit_test(test_parameters_and_names),
      cmocka_unit_test(test_init_statistics),
      cmocka_unit_test(test_forward_matches_reference),
      cmocka_unit_test(test_forward_errors),
      cmocka_unit_test(test_forward_new_activations),
      cmocka_unit_test(test_output_transform),
      cmocka_unit_test(test_model_without_linear),
      cmocka_unit_test(test_predict_kinds),
      cmocka_unit_test(test_training_flag_and_device),
      cmocka_unit_test(test_save_load_round_trip),
      cmocka_unit_test(test_load_weights_checks_first),
      cmocka_unit_test(test_bad_files),
      cmocka_unit_test(test_handle_errors),
  };
  return cmocka_run_group_tests(tests, setup, kiln_test_context_teardown);
}
