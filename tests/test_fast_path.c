/* The fast path's switches through the public API
 * (kiln_trainer_options_set_fast_path and the KILN_ENABLE and KILN_DISABLE environment
 * variables): training with every part off equals the default run bit for bit
 * on the CPU with Adam (the CPU's one part, epilogues, folds plain SGD into
 * the weight-gradient products and leaves Adam alone), and within float
 * rounding on cuda:0 (test_fast_path_cuda, KILN_TEST_DEVICE=cuda) and for
 * plain SGD with weight decay on both;
 * the names in KILN_ENABLE and KILN_DISABLE are checked when a trainer is created. */
#include "support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 96, IN = 6, HIDDEN = 12, OUT = 3, NPARAM = IN * HIDDEN + HIDDEN + HIDDEN * OUT + OUT };

static kiln_device dev = {KILN_DEVICE_CPU, -1};

static int setup(void **state) {
  kiln_test_context_setup(state);
  dev = kiln_test_device(*state);
  return 0;
}

static kiln_dataset *make_dataset(kiln_context *ctx) {
  kiln_test_rng rng = kiln_test_rng_make(8);
  float x[N * IN];
  int64_t y[N];
  kiln_test_fill_uniform_f32(&rng, x, N * IN, -1, 1);
  for (int i = 0; i < N; ++i) y[i] = (x[IN * i] > 0) + (x[IN * i + 1] > 0.3f);
  return kiln_test_dataset(ctx, x, y, N, IN, dev);
}

static void read_weights(kiln_model *model, double *weights) {
  assert_int_equal(kiln_test_read_params(model, weights, NPARAM), NPARAM);
}

/* Two epochs (12 steps of 16, with dropout) from a fixed seed with
 * `optimizer`: Adam at lr 0.01, or SGD at lr 0.1 with weight decay 0.01;
 * writes the weights. Returns kiln_trainer_create's status (the run happens
 * only when it is KILN_OK). */
static kiln_status train_with(kiln_optimizer_kind optimizer, int set_fast_path, uint32_t fast_path, double *weights) {
  kiln_context *ctx = kiln_test_context_create(42);
  kiln_dataset *ds = make_dataset(ctx);
  kiln_model *model = kiln_test_model_on(ctx, "6-12-3:gelu:dropout=0.2", dev, KILN_F32);
  kiln_trainer_options *o = NULL;
  kiln_trainer *trainer = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  if (optimizer == KILN_OPTIM_SGD) {
    assert_kiln_ok(kiln_trainer_options_set_optimizer(o, KILN_OPTIM_SGD));
    assert_kiln_ok(kiln_trainer_options_set_lr(o, 0.1));
    assert_kiln_ok(kiln_trainer_options_set_weight_decay(o, 0.01));
  } else {
    assert_kiln_ok(kiln_trainer_options_set_optimizer(o, KILN_OPTIM_ADAM));
    assert_kiln_ok(kiln_trainer_options_set_lr(o, 0.01));
  }
  assert_kiln_ok(kiln_trainer_options_set_batch_size(o, 16));
  assert_kiln_ok(kiln_trainer_options_set_shuffle_seed(o, 3));
  if (set_fast_path) assert_kiln_ok(kiln_trainer_options_set_fast_path(o, fast_path));
  kiln_status status = kiln_trainer_create(model, o, &trainer);
  if (status == KILN_OK) {
    double initial[NPARAM];
    read_weights(model, initial);
    kiln_history *h = NULL;
    assert_kiln_ok(kiln_trainer_fit(trainer, ds, NULL, 2, NULL, NULL, &h));
    kiln_history_release(h);
    read_weights(model, weights);
    assert_true(memcmp(initial, weights, sizeof initial) != 0); /* it trained */
  }
  kiln_trainer_release(trainer);
  kiln_trainer_options_release(o);
  kiln_model_release(model);
  kiln_dataset_release(ds);
  kiln_context_release(ctx);
  return status;
}

/* train_with Adam. */
static kiln_status train(int set_fast_path, uint32_t fast_path, double *weights) {
  return train_with(KILN_OPTIM_ADAM, set_fast_path, fast_path, weights);
}

/* On the CPU the same kernels run either way: equal bit for bit. On CUDA the
 * fast path fuses and reorders f32 operations (epilogues, fused MLP), which
 * moves each step by f32 rounding (~1e-7 relative), and Adam's normalised
 * steps amplify it where a gradient is near zero: over 12 Adam steps of lr
 * 0.01, up to 3.9e-5 on an H200 (2026-11-27, where cuBLASLt chose other
 * algorithms under compute-sanitizer), so 1e-4; a fast path that computed
 * something else would be off by O(lr) = 1e-2 after one step. */
static void assert_same_training(const double *a, const double *b) {
  if (dev.kind == KILN_DEVICE_CPU) assert_memory_equal(a, b, NPARAM * sizeof *a);
  else
    assert_allclose(a, b, NPARAM, 1e-4, 1e-4);
}

static void test_all_off_equals_default(void **state) {
  (void)state;
  double def[NPARAM], off[NPARAM], some[NPARAM];
  unsetenv("KILN_DISABLE");
  assert_kiln_ok(train(0, 0, def));
  assert_kiln_ok(train(1, 0, off));
  assert_same_training(off, def);
  assert_kiln_ok(train(1, KILN_FAST_PATH_EPILOGUES | KILN_FAST_PATH_CUDNN, some));
  assert_same_training(some, def);
  double all[NPARAM];
  assert_kiln_ok(train(1, KILN_FAST_PATH_ALL, all));
  assert_same_training(all, def);
}

/* Plain SGD: the CPU's fast path fuses its update into the weight-gradient
 * products (on CUDA the epilogues reorder f32 operations), so the weights
 * agree with every part off within f32 rounding over 12 steps of lr 0.1
 * (1.5e-7 measured), where a wrong update is off by far more: dropping the
 * weight decay, 4.9e-3; a layer's input gradient taken from the already
 * updated weights, 2.5e-3. */
static void test_plain_sgd_agrees(void **state) {
  (void)state;
  double def[NPARAM], off[NPARAM];
  unsetenv("KILN_DISABLE");
  assert_kiln_ok(train_with(KILN_OPTIM_SGD, 0, 0, def));
  assert_kiln_ok(train_with(KILN_OPTIM_SGD, 1, 0, off));
  assert_allclose(def, off, NPARAM, 1e-5, 1e-5);
}

static void test_fast_path_option_errors(void **state) {
  (void)state;
  kiln_trainer_options *o = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_status(kiln_trainer_options_set_fast_path(o, KILN_FAST_PATH_ALL + 1), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_fast_path(o, 0x80000000u), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_fast_path(NULL, 0), KILN_ERROR_INVALID_ARGUMENT);
  assert_kiln_ok(kiln_trainer_options_set_fast_path(o, KILN_FAST_PATH_ALL));
  kiln_trainer_options_release(o);
}

/* The environment variable var: each bad value is refused when a trainer is
 * created, naming the bad entry and var; each good one is accepted, and
 * training is the same as without it. */
static void check_env_variable(const char *var, const char *const *bad, const char *const *bad_entry, size_t n_bad,
                               const char *const *good, size_t n_good) {
  double def[NPARAM], got[NPARAM];
  unsetenv("KILN_DISABLE");
  unsetenv("KILN_ENABLE");
  assert_kiln_ok(train(0, 0, def));
  for (size_t i = 0; i < n_bad; ++i) {
    setenv(var, bad[i], 1);
    assert_status(train(0, 0, got), KILN_ERROR_INVALID_ARGUMENT);
    assert_last_error_contains(bad_entry[i]);
    assert_last_error_contains(var);
  }
  for (size_t i = 0; i < n_good; ++i) {
    setenv(var, good[i], 1);
    memset(got, 0, sizeof got);
    assert_kiln_ok(train(0, 0, got));
    assert_same_training(got, def);
  }
  unsetenv(var);
}

static void test_kiln_disable(void **state) {
  (void)state;
  const char *bad[] = {"bogus", "graphs,nonsense"}, *entry[] = {"bogus", "nonsense"};
  const char *good[] = {"graphs,cudnn", "epilogues", "cudnn,graphs", "all", ""};
  check_env_variable("KILN_DISABLE", bad, entry, 2, good, sizeof good / sizeof good[0]);
}

/* KILN_ENABLE adds parts (cuDNN is off by default) with the same checks. */
static void test_kiln_enable(void **state) {
  (void)state;
  const char *bad[] = {"cudnn,bogus"}, *entry[] = {"bogus"};
  const char *good[] = {"cudnn", "all", "graphs,epilogues", ""};
  check_env_variable("KILN_ENABLE", bad, entry, 1, good, sizeof good / sizeof good[0]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_off_equals_default),
      cmocka_unit_test(test_plain_sgd_agrees),
      cmocka_unit_test(test_fast_path_option_errors),
      cmocka_unit_test(test_kiln_disable),
      cmocka_unit_test(test_kiln_enable),
  };
  return cmocka_run_group_tests(tests, setup, kiln_test_context_teardown);
}
