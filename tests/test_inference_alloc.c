/* A prediction allocates only its result, after the first call at a batch
 * size (nn/model_inference.cpp), counted by tests/oom's allocator
 * (failmalloc, armed so far that it never fails): main re-executes the
 * program with it preloaded. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "support.h"

#include <dlfcn.h>
#include <limits.h>

#include "kiln/kiln.h"

static void (*count_from_here)(long n);
static int (*count_until_here)(long *allocations);

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};

/* Allocations of one call, counted by the preloaded allocator. */
static long allocations_of_predict(kiln_model *model, kiln_tensor *xt, kiln_predict_kind kind) {
  kiln_tensor *y = NULL;
  count_from_here(LONG_MAX);
  const kiln_status status = kiln_model_predict(model, xt, kind, &y);
  kiln_tensor_release(y);
  long n = 0;
  count_until_here(&n);
  assert_int_equal(status, KILN_OK);
  return n;
}

static long allocations_of_empty(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype) {
  kiln_tensor *y = NULL;
  count_from_here(LONG_MAX);
  const kiln_status status = kiln_tensor_empty(ctx, shape, ndim, dtype, cpu, &y);
  kiln_tensor_release(y);
  long n = 0;
  count_until_here(&n);
  assert_int_equal(status, KILN_OK);
  return n;
}

/* After the first call at a batch size, a prediction allocates its result
 * (the handle, its storage, the data) and nothing more: no activations, no
 * packing, no thread hand-off. So every model, batch size and thread count
 * costs one kind the same number of allocations, and no more than a new empty
 * tensor through the API does (whose argument checks allocate too). */
static void predict_allocates_only_its_result(void **state) {
  (void)state;
  const struct {
    const char *spec;
    int64_t rows, threads;
  } cases[] = {{"784-32-10", 1, 1}, {"784-32-10", 64, 2}, {"784-1024-1024-10", 1, 2}, {"784-1024-1024-10", 64, 2},
               {"12-40-17-5:tanh:dropout=0.3", 4096, 2}};
  long first[3] = {-1, -1, -1}; /* per kind: classes are 1-D i64, the others 2-D f32 */
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    kiln_context *ctx = kiln_test_cpu_context(7, cases[c].threads);
    kiln_model *model = kiln_test_eval_model(ctx, cases[c].spec);
    int64_t in = 0, out = 0;
    assert_kiln_ok(kiln_model_input_size(model, &in));
    assert_kiln_ok(kiln_model_output_size(model, &out));
    const int64_t x_shape[2] = {cases[c].rows, in};
    kiln_tensor *xt = NULL;
    assert_kiln_ok(kiln_tensor_ones(ctx, x_shape, 2, KILN_F32, cpu, &xt));
    const int64_t logits_shape[2] = {cases[c].rows, out}, classes_shape[1] = {cases[c].rows};
    for (kiln_predict_kind kind = KILN_PREDICT_LOGITS; kind <= KILN_PREDICT_CLASSES; ++kind) {
      (void)allocations_of_predict(model, xt, kind); /* the first call packs and sizes the buffers */
      const long got = allocations_of_predict(model, xt, kind);
      const long empty = kind == KILN_PREDICT_CLASSES ? allocations_of_empty(ctx, classes_shape, 1, KILN_I64)
                                                      : allocations_of_empty(ctx, logits_shape, 2, KILN_F32);
      if (first[kind] < 0) first[kind] = got;
      if (got != first[kind] || got > empty)
        fail_msg("%s batch %lld kind %d: %ld allocations per call (the first case: %ld; a new empty result through "
                 "the API: %ld)",
                 cases[c].spec, (long long)cases[c].rows, (int)kind, got, first[kind], empty);
    }
    kiln_tensor_release(xt);
    kiln_model_release(model);
    kiln_context_release(ctx);
  }
}

int main(int argc, char **argv) {
  (void)argc;
  if (kiln_test_preload(KILN_FAILMALLOC_PATH, "kiln_oom_arm", argv) != 0) return 1;
  count_from_here = (void (*)(long))dlsym(RTLD_DEFAULT, "kiln_oom_arm");
  count_until_here = (int (*)(long *))dlsym(RTLD_DEFAULT, "kiln_oom_disarm");
  if (!count_from_here || !count_until_here) return 1;
  const struct CMUnitTest tests[] = {cmocka_unit_test(predict_allocates_only_its_result)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
