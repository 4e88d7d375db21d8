/* Shared helpers for kiln's CMocka tests; see support.h. */
#define _GNU_SOURCE /* _XOPEN_SOURCE 700, and RTLD_DEFAULT */

#include "support.h"

#include <dlfcn.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- status assertions ------------------------------------------------ */

void kiln_test_check_status(kiln_status got, kiln_status expected, const char *expr, const char *file, int line) {
  if (got == expected) return;
  print_error("%s\n  returned %s, expected %s\n  kiln_last_error: %s\n", expr, kiln_status_name(got),
              kiln_status_name(expected), kiln_last_error());
  _fail(file, line);
}

void kiln_test_check_last_error(const char *needle, const char *file, int line) {
  const char *message = kiln_last_error();
  if (strstr(message, needle)) return;
  print_error("kiln_last_error() is \"%s\"\n  expected it to contain \"%s\"\n", message, needle);
  _fail(file, line);
}

/* ---- contexts and devices ----------------------------------------------- */

kiln_context *kiln_test_context_create(uint64_t seed) {
  kiln_context_options *options = NULL;
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_options_create(&options));
  assert_kiln_ok(kiln_context_options_set_seed(options, seed));
  assert_kiln_ok(kiln_context_options_set_log_level(options, KILN_LOG_ERROR));
  kiln_status status = kiln_context_create(options, &ctx);
  kiln_context_options_release(options);
  assert_kiln_ok(status);
  return ctx;
}

kiln_context *kiln_test_cpu_context(uint64_t seed, int64_t threads) {
  kiln_context_options *options = NULL;
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_options_create(&options));
  assert_kiln_ok(kiln_context_options_set_seed(options, seed));
  assert_kiln_ok(kiln_context_options_set_num_threads(options, threads));
  assert_kiln_ok(kiln_context_options_set_log_level(options, KILN_LOG_ERROR));
  assert_kiln_ok(kiln_context_options_set_enable_cuda(options, 0));
  kiln_status status = kiln_context_create(options, &ctx);
  kiln_context_options_release(options);
  assert_kiln_ok(status);
  return ctx;
}

kiln_model *kiln_test_eval_model(kiln_context *ctx, const char *text) {
  const kiln_device cpu = {KILN_DEVICE_CPU, -1};
  kiln_model_spec *spec = NULL;
  kiln_model *model = NULL;
  assert_kiln_ok(kiln_model_spec_create(&spec));
  assert_kiln_ok(kiln_model_spec_parse(spec, text));
  kiln_status status = kiln_model_create(ctx, spec, cpu, &model);
  kiln_model_spec_release(spec);
  assert_kiln_ok(status);
  assert_kiln_ok(kiln_model_set_training(model, 0));
  return model;
}

int kiln_test_context_setup(void **state) {
  *state = kiln_test_context_create(0);
  return 0;
}

int kiln_test_context_teardown(void **state) {
  kiln_context_release((kiln_context *)*state);
  *state = NULL;
  return 0;
}

int kiln_test_cuda_device(kiln_context *ctx, kiln_device *dev) {
  int available = 0;
  assert_kiln_ok(kiln_cuda_is_available(ctx, &available));
  if (dev) {
    dev->kind = available ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU;
    dev->index = available ? 0 : -1;
  }
  return available;
}

static int cuda_run(void) {
  const char *mode = getenv("KILN_TEST_DEVICE");
  return mode && strcmp(mode, "cuda") == 0;
}

/* Runs before main in every test program: a KILN_TEST_DEVICE=cuda run on a
 * machine without a usable GPU leaves at once as skipped. */
__attribute__((constructor)) static void skip_cuda_run_without_gpu(void) {
  if (!cuda_run()) return;
  kiln_context *ctx = NULL;
  int available = 0;
  if (kiln_context_create(NULL, &ctx) == KILN_OK) {
    if (kiln_cuda_is_available(ctx, &available) != KILN_OK) available = 0;
    if (!available) {
      const char *why = NULL;
      if (kiln_cuda_unavailable_reason(ctx, &why) != KILN_OK) why = kiln_last_error();
      fprintf(stderr, "skipped: no usable CUDA device (%s)\n", why ? why : "unknown");
    }
    kiln_context_release(ctx);
  }
  if (!available) exit(KILN_TEST_SKIPPED);
}

int kiln_test_cuda_run(void) { return cuda_run(); }

kiln_device kiln_test_device(kiln_context *ctx) {
  kiln_device dev;
  kiln_test_gpu_cases(ctx, &dev);
  return dev;
}

int kiln_test_gpu_cases(kiln_context *ctx, kiln_device *dev) {
  kiln_device gpu;
  int run = cuda_run() && kiln_test_cuda_device(ctx, &gpu);
  if (dev) *dev = run ? gpu : (kiln_device){KILN_DEVICE_CPU, -1};
  return run;
}

int kiln_test_devices(kiln_context *ctx, kiln_device devs[2]) {
  devs[0].kind = KILN_DEVICE_CPU;
  devs[0].index = -1;
  return kiln_test_gpu_cases(ctx, &devs[1]) ? 2 : 1;
}

/* ---- tensors ------------------------------------------------------------ */

static int64_t shape_numel(const int64_t *shape, int64_t ndim) {
  int64_t n = 1;
  for (int64_t i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

kiln_tensor *kiln_test_tensor_f32(kiln_context *ctx, const float *values, const int64_t *shape, int64_t ndim,
                                  kiln_device device) {
  kiln_tensor *t = NULL;
  int64_t nbytes = shape_numel(shape, ndim) * (int64_t)sizeof(float);
  assert_kiln_ok(kiln_tensor_from_host(ctx, values, nbytes, shape, ndim, KILN_F32, device, &t));
  return t;
}

kiln_dataset *kiln_test_dataset(kiln_context *ctx, const float *x, const int64_t *y, int64_t n, int64_t features,
                                kiln_device device) {
  const int64_t xs[] = {n, features}, ys[] = {n};
  kiln_tensor *xt = kiln_test_tensor_f32(ctx, x, xs, 2, device), *yt = NULL;
  assert_kiln_ok(kiln_tensor_from_host(ctx, y, n * (int64_t)sizeof(int64_t), ys, 1, KILN_I64, device, &yt));
  kiln_dataset *ds = NULL;
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, xt, yt, &ds));
  kiln_tensor_release(xt);
  kiln_tensor_release(yt);
  return ds;
}

kiln_model *kiln_test_model_on(kiln_context *ctx, const char *spec_text, kiln_device device, kiln_dtype dtype) {
  kiln_model_spec *spec = NULL;
  kiln_model *model = NULL;
  assert_kiln_ok(kiln_model_spec_create(&spec));
  assert_kiln_ok(kiln_model_spec_parse(spec, spec_text));
  assert_kiln_ok(kiln_model_create_dtype(ctx, spec, device, dtype, &model));
  kiln_model_spec_release(spec);
  return model;
}

kiln_model *kiln_test_model(kiln_context *ctx, const char *spec_text) {
  const kiln_device cpu = {KILN_DEVICE_CPU, -1};
  return kiln_test_model_on(ctx, spec_text, cpu, KILN_F32);
}

kiln_tensor *kiln_test_tensor_f64(kiln_context *ctx, const double *values, const int64_t *shape, int64_t ndim,
                                  kiln_device device) {
  kiln_tensor *t = NULL;
  int64_t nbytes = shape_numel(shape, ndim) * (int64_t)sizeof(double);
  assert_kiln_ok(kiln_tensor_from_host(ctx, values, nbytes, shape, ndim, KILN_F64, device, &t));
  return t;
}

void kiln_test_read_f64(const kiln_tensor *tensor, double *out, int64_t n) {
  int64_t numel = 0;
  assert_kiln_ok(kiln_tensor_numel(tensor, &numel));
  if (numel != n) {
    print_error("tensor has %lld elements, the reference %lld\n", (long long)numel, (long long)n);
    fail();
  }
  const kiln_device cpu = {KILN_DEVICE_CPU, -1};
  kiln_tensor *as_f64 = NULL, *on_cpu = NULL;
  /* Each step runs only if the one before succeeded; handles are released
   * before asserting, as the assertion does not return. */
  kiln_status status = kiln_tensor_cast(tensor, KILN_F64, &as_f64);
  if (status == KILN_OK) status = kiln_tensor_to(as_f64, cpu, &on_cpu);
  if (status == KILN_OK) status = kiln_tensor_copy_to_host(on_cpu, out, n * (int64_t)sizeof(double));
  kiln_tensor_release(on_cpu);
  kiln_tensor_release(as_f64);
  assert_kiln_ok(status);
}

void kiln_test_write_f64(kiln_tensor *tensor, const double *values, int64_t n) {
  int64_t numel = 0;
  kiln_dtype dtype;
  assert_kiln_ok(kiln_tensor_numel(tensor, &numel));
  assert_kiln_ok(kiln_tensor_dtype(tensor, &dtype));
  assert_int_equal(numel, n);
  if (dtype == KILN_F64) {
    assert_kiln_ok(kiln_tensor_copy_from_host(tensor, values, n * (int64_t)sizeof(double)));
    return;
  }
  assert_int_equal(dtype, KILN_F32);
  float *f = malloc((size_t)n * sizeof *f);
  for (int64_t i = 0; i < n; ++i) f[i] = (float)values[i];
  const kiln_status status = kiln_tensor_copy_from_host(tensor, f, n * (int64_t)sizeof(float));
  free(f);
  assert_kiln_ok(status);
}

/* Reads model's parameters into out, or writes them from in (the other one
 * NULL), tensor after tensor; returns their count, failing past capacity. */
static int64_t params_io(kiln_model *model, double *out, const double *in, int64_t capacity) {
  int64_t tensors = 0, at = 0;
  assert_kiln_ok(kiln_model_num_parameter_tensors(model, &tensors));
  for (int64_t i = 0; i < tensors; ++i) {
    kiln_tensor *p = NULL;
    int64_t numel = 0;
    assert_kiln_ok(kiln_model_parameter(model, i, &p));
    assert_kiln_ok(kiln_tensor_numel(p, &numel));
    if (at + numel > capacity) {
      kiln_tensor_release(p);
      fail_msg("the model has more than %lld parameters", (long long)capacity);
    }
    if (out) kiln_test_read_f64(p, out + at, numel);
    else kiln_test_write_f64(p, in + at, numel);
    at += numel;
    kiln_tensor_release(p);
  }
  return at;
}

int64_t kiln_test_read_params(kiln_model *model, double *out, int64_t capacity) {
  return params_io(model, out, NULL, capacity);
}

void kiln_test_write_params(kiln_model *model, const double *values, int64_t n) {
  assert_int_equal(params_io(model, NULL, values, n), n);
}

/* ---- numerical comparison ----------------------------------------------- */

int64_t kiln_test_count_mismatches(const double *got, const double *want, int64_t n, double rtol, double atol,
                                   int64_t *worst) {
  int64_t bad = 0;
  double worst_excess = 0.0;
  *worst = -1;
  for (int64_t i = 0; i < n; ++i) {
    double excess;
    if (isnan(want[i]) || isnan(got[i])) {
      excess = (isnan(want[i]) && isnan(got[i])) ? 0.0 : INFINITY;
    } else if (isinf(want[i]) || isinf(got[i])) {
      excess = got[i] == want[i] ? 0.0 : INFINITY;
    } else {
      excess = fabs(got[i] - want[i]) - (atol + rtol * fabs(want[i]));
    }
    if (excess > 0.0) {
      ++bad;
      if (*worst < 0 || excess > worst_excess) {
        *worst = i;
        worst_excess = excess;
      }
    }
  }
  return bad;
}

static void report_mismatches(const double *got, const double *want, int64_t n, double rtol, double atol,
                              int64_t bad, int64_t worst) {
  print_error("%lld of %lld elements differ (rtol %g, atol %g); worst at [%lld]: got %.17g, want %.17g "
              "(|diff| %.3g)\n",
              (long long)bad, (long long)n, rtol, atol, (long long)worst, got[worst], want[worst],
              fabs(got[worst] - want[worst]));
}

void kiln_test_check_allclose(const double *got, const double *want, int64_t n, double rtol, double atol,
                              const char *file, int line) {
  int64_t worst;
  int64_t bad = kiln_test_count_mismatches(got, want, n, rtol, atol, &worst);
  if (bad == 0) return;
  report_mismatches(got, want, n, rtol, atol, bad, worst);
  _fail(file, line);
}

void kiln_test_check_tensor_close(const kiln_tensor *tensor, const double *want, int64_t n, double rtol, double atol,
                                  const char *file, int line) {
  double *got = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  assert_non_null(got);
  kiln_test_read_f64(tensor, got, n);
  int64_t worst;
  int64_t bad = kiln_test_count_mismatches(got, want, n, rtol, atol, &worst);
  if (bad) report_mismatches(got, want, n, rtol, atol, bad, worst);
  free(got); /* before _fail, which does not return */
  if (bad) _fail(file, line);
}

/* ---- deterministic host random numbers ---------------------------------- */

kiln_test_rng kiln_test_rng_make(uint64_t seed) {
  kiln_test_rng rng = {seed};
  return rng;
}

uint64_t kiln_test_rng_next(kiln_test_rng *rng) {
  uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double kiln_test_rng_uniform(kiln_test_rng *rng, double lo, double hi) {
  double u = (double)(kiln_test_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
  return lo + (hi - lo) * u;
}

double kiln_test_rng_normal(kiln_test_rng *rng) {
  /* 1 - u lies in (0, 1], so the log is finite. */
  double u1 = 1.0 - kiln_test_rng_uniform(rng, 0.0, 1.0);
  double u2 = kiln_test_rng_uniform(rng, 0.0, 1.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t kiln_test_rng_below(kiln_test_rng *rng, int64_t n) {
  return (int64_t)(kiln_test_rng_next(rng) % (uint64_t)n);
}

void kiln_test_fill_uniform_f32(kiln_test_rng *rng, float *out, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; ++i) out[i] = (float)kiln_test_rng_uniform(rng, lo, hi);
}

void kiln_test_fill_uniform_f64(kiln_test_rng *rng, double *out, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; ++i) out[i] = kiln_test_rng_uniform(rng, lo, hi);
}

/* ---- files ---------------------------------------------------------------- */

void kiln_test_make_temp_dir(char *buf, size_t buf_size) {
  const char *base = getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  int written = snprintf(buf, buf_size, "%s/kiln-test-XXXXXX", base);
  assert_true(written > 0 && (size_t)written < buf_size);
  if (!mkdtemp(buf)) {
    print_error("mkdtemp(%s) failed\n", buf);
    fail();
  }
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  (void)type;
  (void)ftw;
  remove(path);
  return 0;
}

void kiln_test_remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

kiln_test_file_fixture *kiln_test_file_fixture_create(const char *name) {
  kiln_test_file_fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->ctx = kiln_test_context_create(0);
  kiln_test_make_temp_dir(f->dir, sizeof f->dir);
  int written = snprintf(f->path, sizeof f->path, "%s/%s", f->dir, name);
  assert_true(written > 0 && (size_t)written < sizeof f->path);
  return f;
}

void kiln_test_file_fixture_destroy(kiln_test_file_fixture *f) {
  kiln_test_remove_tree(f->dir);
  kiln_context_release(f->ctx);
  free(f);
}

int kiln_test_preload(const char *library, const char *probe, char **argv) {
  if (dlsym(RTLD_DEFAULT, probe)) return 0;
  if (getenv("KILN_TEST_PRELOADED")) {
    fprintf(stderr, "%s is preloaded but %s is not found in it\n", library, probe);
    return -1;
  }
  const char *asan = getenv("ASAN_OPTIONS");
  char asan_options[1024];
  snprintf(asan_options, sizeof asan_options, "%s%sverify_asan_link_order=0", asan ? asan : "", asan && *asan ? ":" : "");
  if (setenv("LD_PRELOAD", library, 1) != 0 || setenv("ASAN_OPTIONS", asan_options, 1) != 0 ||
      setenv("KILN_TEST_PRELOADED", "1", 1) != 0)
    return -1;
  execv("/proc/self/exe", argv);
  perror("execv /proc/self/exe");
  return -1;
}
