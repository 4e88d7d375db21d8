/*
 * Shared helpers for kiln's CMocka tests. Include this instead of cmocka.h:
 * it pulls in what cmocka.h needs first, then kiln.h.
 *
 *   assert_kiln_ok(kiln_tensor_zeros(...));            fails with kiln_last_error()
 *   assert_status(kiln_device_parse(NULL, "gpu", &d), KILN_ERROR_INVALID_ARGUMENT);
 *   assert_allclose(got, want, n, 1e-6, 1e-7);         prints the worst element
 *   kiln_test_rng rng = kiln_test_rng_make(42);        inputs independent of kiln's RNG
 *
 * GPU tests. Every program with device cases is registered twice (see
 * tests/CMakeLists.txt): NAME runs them on the CPU; NAME_cuda runs with
 * KILN_TEST_DEVICE=cuda, exits KILN_TEST_SKIPPED (77, which CTest counts as
 * skipped, never as passed) when no CUDA device is usable, and otherwise runs
 * the device cases on the CPU and on cuda:0. Device-generic cases loop over
 * kiln_test_devices; CUDA-only cases ask kiln_test_gpu_cases and skip() when
 * it says no. kiln_test_cuda_device only reports what the machine has.
 * Programs whose NAME_cuda twin runs only the GPU half (test_gradients,
 * test_trainer, test_model, test_checkpoint, test_precision, test_fast_path,
 * test_fashion_mnist) run their cases on kiln_test_device (the CPU, or cuda:0
 * alone in the cuda run) and skip() CPU-only cases when kiln_test_cuda_run().
 */
#ifndef KILN_TESTS_SUPPORT_H
#define KILN_TESTS_SUPPORT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kiln/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The exit code CTest treats as "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt). */
#define KILN_TEST_SKIPPED 77

/* ---- status assertions ------------------------------------------------ */

/* Fails the test unless expr returns KILN_OK; the message shows the
 * expression, the status name and kiln_last_error(). */
#define assert_kiln_ok(expr) kiln_test_check_status((expr), KILN_OK, #expr, __FILE__, __LINE__)
/* Fails the test unless expr returns exactly `expected`. */
#define assert_status(expr, expected) kiln_test_check_status((expr), (expected), #expr, __FILE__, __LINE__)
/* Fails the test unless kiln_last_error() contains `needle`. */
#define assert_last_error_contains(needle) kiln_test_check_last_error((needle), __FILE__, __LINE__)

void kiln_test_check_status(kiln_status got, kiln_status expected, const char *expr, const char *file, int line);
void kiln_test_check_last_error(const char *needle, const char *file, int line);

/* ---- contexts and devices ----------------------------------------------- */

/* A new context with seed `seed`, log level ERROR (so expected failures stay
 * quiet) and the CUDA plugin enabled; fails the test if it cannot be made. */
kiln_context *kiln_test_context_create(uint64_t seed);

/* As kiln_test_context_create, with `threads` CPU threads and CUDA off. */
kiln_context *kiln_test_cpu_context(uint64_t seed, int64_t threads);

/* A model of spec text (kiln_model_spec_parse's form, e.g. "784-32-10") on
 * the CPU, in evaluation mode; fails the test if it cannot be made. */
kiln_model *kiln_test_eval_model(kiln_context *ctx, const char *text);

/* CMocka fixtures: *state becomes a kiln_context * (seed 0), released in the
 * teardown. Use with cmocka_unit_test_setup_teardown or as group fixtures. */
int kiln_test_context_setup(void **state);
int kiln_test_context_teardown(void **state);

/* Returns 1 and sets *dev to cuda:0 when ctx has a usable CUDA device; else
 * returns 0 and sets *dev to the CPU. dev may be NULL. */
int kiln_test_cuda_device(kiln_context *ctx, kiln_device *dev);

/* The devices to run device-generic cases on: the CPU, then cuda:0 in a
 * KILN_TEST_DEVICE=cuda run. Returns how many were written to devs (1 or 2). */
int kiln_test_devices(kiln_context *ctx, kiln_device devs[2]);

/* Whether this is a KILN_TEST_DEVICE=cuda run (which, past the constructor in
 * support.c, means cuda:0 is usable). Programs whose cases all run on one
 * device use kiln_test_device; cases that only make sense on the CPU skip()
 * when this says 1, so that the NAME_cuda twin runs only the GPU half. */
int kiln_test_cuda_run(void);

/* The one device of a program's device cases: cuda:0 in a
 * KILN_TEST_DEVICE=cuda run, else the CPU. */
kiln_device kiln_test_device(kiln_context *ctx);

/* Whether to run CUDA-only cases: 1 (and *dev = cuda:0) in a
 * KILN_TEST_DEVICE=cuda run, else 0 (and *dev = the CPU). dev may be NULL. */
int kiln_test_gpu_cases(kiln_context *ctx, kiln_device *dev);

/* ---- tensors ------------------------------------------------------------ */

/* A new f32 tensor of the given shape on device holding `values`. */
kiln_tensor *kiln_test_tensor_f32(kiln_context *ctx, const float *values, const int64_t *shape, int64_t ndim,
                                  kiln_device device);
/* A new f64 tensor of the given shape on device holding `values`. */
/* A classification dataset of n samples on device: features x [n, features]
 * (f32) and labels y [n] (i64), both copied. */
kiln_dataset *kiln_test_dataset(kiln_context *ctx, const float *x, const int64_t *y, int64_t n, int64_t features,
                                kiln_device device);
/* A new f32 model of spec_text ("4-3-2") on the CPU, initialised from ctx's seed. */
kiln_model *kiln_test_model(kiln_context *ctx, const char *spec_text);
/* As kiln_test_model, on device with parameters of dtype. */
kiln_model *kiln_test_model_on(kiln_context *ctx, const char *spec_text, kiln_device device, kiln_dtype dtype);
kiln_tensor *kiln_test_tensor_f64(kiln_context *ctx, const double *values, const int64_t *shape, int64_t ndim,
                                  kiln_device device);
/* Reads any tensor (any dtype, any device) as n doubles: it is cast to f64
 * and copied to the host. Fails the test unless its numel equals n. */
void kiln_test_read_f64(const kiln_tensor *tensor, double *out, int64_t n);
/* Writes n doubles into an f32 or f64 tensor on any device (rounded to f32
 * for an f32 one). Fails the test unless its numel equals n. */
void kiln_test_write_f64(kiln_tensor *tensor, const double *values, int64_t n);
/* All of model's parameters, tensor after tensor as kiln_model_parameter
 * numbers them, read into out as kiln_test_read_f64 reads one tensor;
 * returns how many. Fails the test when they are more than capacity. */
int64_t kiln_test_read_params(kiln_model *model, double *out, int64_t capacity);
/* Writes all of model's parameters from values, in that order, as
 * kiln_test_write_f64 writes one tensor. Fails the test unless they are n. */
void kiln_test_write_params(kiln_model *model, const double *values, int64_t n);

/* ---- numerical comparison ----------------------------------------------- */

/* Fails unless |got[i] - want[i]| <= atol + rtol * |want[i]| for every i (NaN
 * matches only NaN); the message names the worst element and the count of
 * mismatches. */
#define assert_allclose(got, want, n, rtol, atol) \
  kiln_test_check_allclose((got), (want), (n), (rtol), (atol), __FILE__, __LINE__)
/* The same for a tensor of any dtype and device against a host reference. */
#define assert_tensor_close(tensor, want, n, rtol, atol) \
  kiln_test_check_tensor_close((tensor), (want), (n), (rtol), (atol), __FILE__, __LINE__)

void kiln_test_check_allclose(const double *got, const double *want, int64_t n, double rtol, double atol,
                              const char *file, int line);
/* How many elements assert_allclose would find outside the bounds; *worst
 * gets the index of the one that exceeds them the most (-1 when none do). */
int64_t kiln_test_count_mismatches(const double *got, const double *want, int64_t n, double rtol, double atol,
                                   int64_t *worst);
void kiln_test_check_tensor_close(const kiln_tensor *tensor, const double *want, int64_t n, double rtol, double atol,
                                  const char *file, int line);

/* ---- deterministic host random numbers ---------------------------------- */

/* SplitMix64: a fixed, documented sequence for test inputs, so references do
 * not depend on kiln's own generator (which is what some tests check). */
typedef struct kiln_test_rng {
  uint64_t state;
} kiln_test_rng;

kiln_test_rng kiln_test_rng_make(uint64_t seed);
uint64_t kiln_test_rng_next(kiln_test_rng *rng);
/* Uniform in [lo, hi). */
double kiln_test_rng_uniform(kiln_test_rng *rng, double lo, double hi);
/* Standard normal (Box-Muller). */
double kiln_test_rng_normal(kiln_test_rng *rng);
/* Uniform integer in [0, n), n > 0. */
int64_t kiln_test_rng_below(kiln_test_rng *rng, int64_t n);
/* Fill n values uniform in [lo, hi). */
void kiln_test_fill_uniform_f32(kiln_test_rng *rng, float *out, int64_t n, double lo, double hi);
void kiln_test_fill_uniform_f64(kiln_test_rng *rng, double *out, int64_t n, double lo, double hi);

/* ---- files ---------------------------------------------------------------- */

/* Creates a fresh empty directory under $TMPDIR (or /tmp) and writes its path
 * into buf; fails the test if it cannot. */
void kiln_test_make_temp_dir(char *buf, size_t buf_size);
/* Removes path and everything below it; missing paths are fine. */
void kiln_test_remove_tree(const char *path);

/* What the file tests share: a context and a fresh temporary directory, with
 * path = dir/name (a file not written yet). */
typedef struct kiln_test_file_fixture {
  kiln_context *ctx;
  char dir[512];
  char path[600];
} kiln_test_file_fixture;
/* Fails the test when the directory cannot be made. */
kiln_test_file_fixture *kiln_test_file_fixture_create(const char *name);
/* Removes the directory and everything in it, and releases the context. */
void kiln_test_file_fixture_destroy(kiln_test_file_fixture *f);

/* ---- a preloaded allocator ------------------------------------------------ */

/* Makes sure `library` (tests/oom/failmalloc.cpp, which counts and can fail
 * allocations) is preloaded: returns 0 when it is (its function `probe` is
 * found), else re-executes this program (argv) with LD_PRELOAD set to it and
 * returns only if that fails (-1, with a message on stderr). Under
 * AddressSanitizer it comes before the sanitizer's runtime in the lookup
 * order, which ASan allows only with verify_asan_link_order=0. */
int kiln_test_preload(const char *library, const char *probe, char **argv);

#ifdef __cplusplus
}
#endif

#endif /* KILN_TESTS_SUPPORT_H */
