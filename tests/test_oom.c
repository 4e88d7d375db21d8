/* Out-of-memory injection, as SQLite tests it: for each operation, fail its
 * 1st allocation, then its 2nd, 3rd, ... until the operation gets through
 * without reaching the failing one. Every failure must come back as
 * KILN_ERROR_OUT_OF_MEMORY (never a crash, an abort or another status),
 * leave no block behind (the allocator counts live blocks; the sanitizer
 * lane's LeakSanitizer checks the same at exit), and leave the context
 * usable: the operation must then succeed when run again.
 *
 * The failing allocator is tests/oom/failmalloc.cpp, preloaded: when it is not
 * loaded yet, main re-executes this program with LD_PRELOAD set to it. kiln
 * runs one thread so that allocations come in the same order every run.
 *
 * Every n is probed (about 3,000 probes, 10 s in a Release build; the
 * figures are in bench/results/oom-*.txt). KILN_OOM_STRIDE=k probes every
 * k-th allocation only, for slow runs (valgrind). KILN_OOM_REPORT=FILE
 * appends one line per operation.
 * KILN_OOM_FIRST=n starts each loop at allocation n, and KILN_OOM_TRACE=1
 * prints the stack of every failed allocation: together they show where a
 * failing probe's allocation is. */
#define _GNU_SOURCE /* RTLD_DEFAULT, setenv */
#include "support.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln/kiln.h"

static void (*oom_arm)(long n);
static int (*oom_disarm)(long *allocations);
static long (*oom_live)(void);

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};
static char dir[512], model_path[600], checkpoint_path[600], save_path[600], images_path[600], labels_path[600];
static kiln_context *shared_ctx;

/* ---- the operations: each frees what it made, and returns the first failure */

#define TRY(call)                  \
  do {                             \
    status = (call);               \
    if (status != KILN_OK) goto out; \
  } while (0)

static kiln_status context_options(kiln_context_options **options) {
  kiln_status status;
  TRY(kiln_context_options_create(options));
  TRY(kiln_context_options_set_enable_cuda(*options, 0));
  TRY(kiln_context_options_set_num_threads(*options, 1));
  TRY(kiln_context_options_set_seed(*options, 7));
  status = kiln_context_options_set_log_level(*options, KILN_LOG_OFF);
out:
  return status;
}

static kiln_status op_context(kiln_context *unused) {
  (void)unused;
  kiln_context_options *options = NULL;
  kiln_context *ctx = NULL;
  kiln_status status;
  TRY(context_options(&options));
  TRY(kiln_context_create(options, &ctx));
out:
  kiln_context_release(ctx);
  kiln_context_options_release(options);
  return status;
}

static kiln_status op_tensor(kiln_context *ctx) {
  const int64_t shape[2] = {16, 8}, other[2] = {8, 4};
  const float ones[16 * 8] = {1};
  kiln_tensor *a = NULL, *b = NULL, *c = NULL;
  kiln_status status;
  TRY(kiln_tensor_empty(ctx, shape, 2, KILN_F32, cpu, &a));
  TRY(kiln_tensor_copy_from_host(a, ones, sizeof ones));
  TRY(kiln_tensor_zeros(ctx, other, 2, KILN_F32, cpu, &b));
  TRY(kiln_tensor_matmul(a, b, &c));
out:
  kiln_tensor_release(c);
  kiln_tensor_release(b);
  kiln_tensor_release(a);
  return status;
}

static kiln_status new_model(kiln_context *ctx, const char *text, kiln_model **model) {
  kiln_model_spec *spec = NULL;
  kiln_status status;
  TRY(kiln_model_spec_create(&spec));
  TRY(kiln_model_spec_parse(spec, text));
  status = kiln_model_create(ctx, spec, cpu, model);
out:
  kiln_model_spec_release(spec);
  return status;
}

static kiln_status op_model_load(kiln_context *ctx) {
  kiln_model *model = NULL;
  kiln_status status = kiln_model_load(ctx, model_path, cpu, &model);
  kiln_model_release(model);
  return status;
}

/* A torch.save file (zip, pickle, strided views of one shared storage), and
 * one whose records are deflated (zlib's own allocations). */
static kiln_status op_torch_load(kiln_context *ctx) {
  kiln_model_spec *spec = NULL;
  kiln_model *model = NULL;
  kiln_status status;
  TRY(kiln_model_spec_create(&spec));
  TRY(kiln_model_spec_parse(spec, "4-3-2"));
  TRY(kiln_model_load_with_spec(ctx, KILN_TORCH_FIXTURES "/mlp_shared.pt", spec, cpu, &model));
  kiln_model_release(model);
  model = NULL;
  status = kiln_model_load_with_spec(ctx, KILN_TORCH_FIXTURES "/mlp_deflated.pt", spec, cpu, &model);
out:
  kiln_model_release(model);
  kiln_model_spec_release(spec);
  return status;
}

static kiln_status op_dataset_load(kiln_context *ctx) {
  kiln_dataset *dataset = NULL;
  kiln_status status = kiln_dataset_load_idx(ctx, images_path, labels_path, &dataset);
  kiln_dataset_release(dataset);
  return status;
}

/* 24 samples of 4 features in 3 classes. */
static kiln_status new_dataset(kiln_context *ctx, kiln_dataset **dataset) {
  float x[24 * 4];
  int64_t y[24];
  for (int i = 0; i < 24; ++i) {
    y[i] = i % 3;
    for (int j = 0; j < 4; ++j) x[i * 4 + j] = (float)((i * 7 + j * 3) % 11) / 11.0f - 0.5f + (float)y[i] * (j == 0);
  }
  const int64_t x_shape[2] = {24, 4}, y_shape[1] = {24};
  kiln_tensor *xt = NULL, *yt = NULL;
  kiln_status status;
  TRY(kiln_tensor_empty(ctx, x_shape, 2, KILN_F32, cpu, &xt));
  TRY(kiln_tensor_copy_from_host(xt, x, sizeof x));
  TRY(kiln_tensor_empty(ctx, y_shape, 1, KILN_I64, cpu, &yt));
  TRY(kiln_tensor_copy_from_host(yt, y, sizeof y));
  status = kiln_dataset_from_tensors(ctx, xt, yt, dataset);
out:
  kiln_tensor_release(yt);
  kiln_tensor_release(xt);
  return status;
}

static kiln_status new_trainer(kiln_model *model, kiln_trainer **trainer) {
  kiln_trainer_options *options = NULL;
  kiln_status status;
  TRY(kiln_trainer_options_create(&options));
  TRY(kiln_trainer_options_set_optimizer(options, KILN_OPTIM_ADAM));
  TRY(kiln_trainer_options_set_batch_size(options, 8));
  status = kiln_trainer_create(model, options, trainer);
out:
  kiln_trainer_options_release(options);
  return status;
}

/* Everything a training run makes: spec, model, dataset, trainer, two
 * epochs with validation, the history. */
static kiln_status op_fit(kiln_context *ctx) {
  kiln_model *model = NULL;
  kiln_dataset *dataset = NULL;
  kiln_trainer *trainer = NULL;
  kiln_history *history = NULL;
  kiln_status status;
  TRY(new_model(ctx, "4-8-3", &model));
  TRY(new_dataset(ctx, &dataset));
  TRY(new_trainer(model, &trainer));
  TRY(kiln_trainer_fit(trainer, dataset, dataset, 2, NULL, NULL, &history));
out:
  kiln_history_release(history);
  kiln_trainer_release(trainer);
  kiln_dataset_release(dataset);
  kiln_model_release(model);
  return status;
}

/* Saves of a model and a checkpoint made beforehand (by save_setup). */
static kiln_model *save_model;
static kiln_trainer *save_trainer;
static kiln_status op_save(kiln_context *ctx) {
  (void)ctx;
  kiln_status status;
  TRY(kiln_model_save(save_model, save_path));
  status = kiln_trainer_save_checkpoint(save_trainer, save_path);
out:
  return status;
}

static kiln_status op_checkpoint_load(kiln_context *ctx) {
  (void)ctx;
  return kiln_trainer_load_checkpoint(save_trainer, checkpoint_path);
}

/* ---- the loop --------------------------------------------------------------- */

static long stride(void) {
  const char *env = getenv("KILN_OOM_STRIDE");
  return env && atol(env) > 0 ? atol(env) : 1;
}

/* Runs op with its n-th allocation failing; *injected says whether the
 * operation got that far. Fails the test unless the status is OK or
 * OUT_OF_MEMORY, or when the operation fails although nothing was injected. */
static kiln_status probe(const char *name, kiln_status (*op)(kiln_context *), long n, long clean, int *injected) {
  oom_arm(n);
  const kiln_status status = op(shared_ctx);
  *injected = oom_disarm(NULL);
  if (status != KILN_OK && (!*injected || status != KILN_ERROR_OUT_OF_MEMORY)) {
    print_error("%s: %s allocation %ld of %ld, the call returned %s: %s\n", name,
                *injected ? "after failing" : "without failing", n, clean, kiln_status_name(status),
                kiln_last_error());
    fail();
  }
  return status;
}

/* Runs op cleanly (it must succeed: the context is still usable) and returns
 * the number of live blocks afterwards. */
static long live_after_clean_run(const char *name, kiln_status (*op)(kiln_context *), long n) {
  const kiln_status again = op(shared_ctx);
  if (again != KILN_OK) {
    print_error("%s: after failing allocation %ld, the operation fails again with %s: %s\n", name, n,
                kiln_status_name(again), kiln_last_error());
    fail();
  }
  return oom_live();
}

static void probe_all(const char *name, kiln_status (*op)(kiln_context *)) {
  /* A clean run first: it fills what kiln and its libraries allocate once and
   * keep (the thread's error string, caches), and counts the allocations. */
  long clean = 0;
  oom_arm(-1);  /* counts, never fails: no allocation is the -1st */
  assert_kiln_ok(op(shared_ctx));
  oom_disarm(&clean);
  long baseline = oom_live();
  const long step = stride();

  const char *first = getenv("KILN_OOM_FIRST");
  long probes = 0, failures = 0, absorbed = 0, once = 0, n = first && atol(first) > 0 ? atol(first) : 1;
  for (;; n += step) {
    int injected = 0;
    const kiln_status status = probe(name, op, n, clean, &injected);
    ++probes;
    if (!injected) break; /* the operation finished before its n-th allocation: the loop is over */
    if (status == KILN_OK) ++absorbed; /* the failed allocation had a fallback */
    else ++failures;
    /* Once a clean run has refilled what the failure emptied, no block may
     * be left over. A block allocated once and kept (a static initialised on
     * an error path the first time it runs) shows as one too: a leak comes
     * back when the same allocation fails again, such a block does not. */
    long live = live_after_clean_run(name, op, n);
    if (live > baseline) {
      const long grown = live - baseline;
      baseline = live;
      probe(name, op, n, clean, &injected);
      live = live_after_clean_run(name, op, n);
      if (live > baseline) {
        print_error("%s: failing allocation %ld of %ld leaks %ld block(s) each time\n", name, n, clean, live - baseline);
        fail();
      }
      once += grown;
    }
  }
  printf("oom: %-16s %6ld allocations, %6ld probes (stride %ld): %ld OUT_OF_MEMORY, %ld absorbed, "
         "%ld block(s) kept once, 0 leaks\n", name, clean, probes, step, failures, absorbed, once);
  const char *report = getenv("KILN_OOM_REPORT");
  if (report && *report) {
    FILE *f = fopen(report, "a");
    assert_non_null(f);
    fprintf(f, "%-16s %11ld %7ld %6ld %13ld %8ld %9ld %5d\n", name, clean, probes, step, failures, absorbed, once, 0);
    fclose(f);
  }
}

static void context_creation(void **state) { (void)state; probe_all("context_create", op_context); }
static void tensor_creation(void **state) { (void)state; probe_all("tensor_create", op_tensor); }
static void model_load(void **state) { (void)state; probe_all("model_load", op_model_load); }
static void dataset_load(void **state) { (void)state; probe_all("dataset_load", op_dataset_load); }
static void torch_load(void **state) { (void)state; probe_all("torch_load", op_torch_load); }
static void fit(void **state) { (void)state; probe_all("fit", op_fit); }
static void save(void **state) { (void)state; probe_all("save", op_save); }
static void checkpoint_load(void **state) { (void)state; probe_all("checkpoint_load", op_checkpoint_load); }

/* ---- files the loaders read, written before any failure is injected ------ */

static void write_file(const char *path, const unsigned char *data, size_t size) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, size, f), size);
  assert_int_equal(fclose(f), 0);
}

static int setup(void **state) {
  (void)state;
  kiln_context_options *options = NULL;
  assert_kiln_ok(context_options(&options));
  assert_kiln_ok(kiln_context_create(options, &shared_ctx));
  kiln_context_options_release(options);
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(model_path, sizeof model_path, "%s/model.safetensors", dir);
  snprintf(checkpoint_path, sizeof checkpoint_path, "%s/checkpoint.safetensors", dir);
  snprintf(save_path, sizeof save_path, "%s/saved.safetensors", dir);
  snprintf(images_path, sizeof images_path, "%s/images.idx3", dir);
  snprintf(labels_path, sizeof labels_path, "%s/labels.idx1", dir);

  assert_kiln_ok(new_model(shared_ctx, "4-8-3", &save_model));
  assert_kiln_ok(kiln_model_save(save_model, model_path));
  assert_kiln_ok(new_trainer(save_model, &save_trainer));
  assert_kiln_ok(kiln_trainer_save_checkpoint(save_trainer, checkpoint_path));

  /* 6 u8 images of 2x3 and their labels. */
  unsigned char images[16 + 6 * 6] = {0, 0, 8, 3, 0, 0, 0, 6, 0, 0, 0, 2, 0, 0, 0, 3};
  unsigned char labels[8 + 6] = {0, 0, 8, 1, 0, 0, 0, 6, 0, 1, 2, 0, 1, 2};
  for (int i = 0; i < 36; ++i) images[16 + i] = (unsigned char)(i * 7);
  write_file(images_path, images, sizeof images);
  write_file(labels_path, labels, sizeof labels);

  /* The thread's error string grows to the heap once, here, not in a probe. */
  kiln_device device;
  assert_int_equal(kiln_device_parse(NULL, "not a device: a text long enough for the message to leave the string's "
                                           "inline buffer",
                                     &device),
                   KILN_ERROR_INVALID_ARGUMENT);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  kiln_trainer_release(save_trainer);
  kiln_model_release(save_model);
  kiln_context_release(shared_ctx);
  kiln_test_remove_tree(dir);
  return 0;
}

int main(int argc, char **argv) {
  (void)argc;
  if (kiln_test_preload(KILN_FAILMALLOC_PATH, "kiln_oom_arm", argv) != 0) return 1;
  oom_arm = (void (*)(long))dlsym(RTLD_DEFAULT, "kiln_oom_arm");
  oom_disarm = (int (*)(long *))dlsym(RTLD_DEFAULT, "kiln_oom_disarm");
  oom_live = (long (*)(void))dlsym(RTLD_DEFAULT, "kiln_oom_live");
  if (!oom_disarm || !oom_live) {
    fprintf(stderr, "test_oom: %s is preloaded but its functions are not found\n", KILN_FAILMALLOC_PATH);
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(context_creation), cmocka_unit_test(tensor_creation), cmocka_unit_test(model_load),
      cmocka_unit_test(torch_load),       cmocka_unit_test(dataset_load),    cmocka_unit_test(fit),
      cmocka_unit_test(save),             cmocka_unit_test(checkpoint_load),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
