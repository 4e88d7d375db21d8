/* A trainer compiles a step program once per batch shape and data source and
 * keeps it (train/program_cache.hpp). A kept program must never run for data
 * it was not built for: each case here changes what a program depends on
 * between two calls of one trainer (the dataset's normalisation, another split
 * of the same data, a new dataset where a released one was) and checks the
 * trainer against a fresh trainer, which has no programs yet, on the same
 * model and data. Before the program key held the whole data source, the
 * first case gave 2.3047 where a fresh trainer gave 9.9753 (issue 21).
 *
 * Runs on the CPU (test_program_cache), or on cuda:0 alone
 * (test_program_cache_cuda, where the programs are also captured as CUDA
 * graphs; skipped without a device). */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static kiln_device dev = {KILN_DEVICE_CPU, -1};

static int setup(void **state) {
  kiln_test_context_setup(state);
  dev = kiln_test_device(*state);
  return 0;
}

enum { FEATURES = 6, CLASSES = 4, SAMPLES = 96, BATCH = 16 };

static kiln_model *make_model(kiln_context *ctx) {
  return kiln_test_model_on(ctx, "6-12-4", dev, KILN_F32);
}

static kiln_trainer *make_trainer(kiln_model *model) {
  kiln_trainer_options *o = NULL;
  kiln_trainer *t = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_batch_size(o, BATCH));
  assert_kiln_ok(kiln_trainer_options_set_lr(o, 0.05));
  assert_kiln_ok(kiln_trainer_options_set_shuffle_seed(o, 7));
  assert_kiln_ok(kiln_trainer_create(model, o, &t));
  kiln_trainer_options_release(o);
  return t;
}

/* Random features in [0, 1) and labels of n samples. */
static void fill_samples(uint64_t seed, float *x, int64_t *y, int64_t n) {
  kiln_test_rng rng = kiln_test_rng_make(seed);
  kiln_test_fill_uniform_f32(&rng, x, n * FEATURES, 0, 1);
  for (int64_t i = 0; i < n; i++) y[i] = kiln_test_rng_below(&rng, CLASSES);
}

static kiln_dataset *make_dataset(kiln_context *ctx, uint64_t seed) {
  float x[SAMPLES * FEATURES];
  int64_t y[SAMPLES];
  fill_samples(seed, x, y, SAMPLES);
  return kiln_test_dataset(ctx, x, y, SAMPLES, FEATURES, dev);
}

/* The loss a trainer that never ran gives for model on ds. */
static double fresh_loss(kiln_model *model, const kiln_dataset *ds) {
  kiln_trainer *fresh = make_trainer(model);
  double loss = 0, accuracy = 0;
  assert_kiln_ok(kiln_trainer_evaluate(fresh, ds, &loss, &accuracy));
  kiln_trainer_release(fresh);
  return loss;
}

static void assert_same_loss(double got, double want) { assert_allclose(&got, &want, 1, 1e-12, 0); }

/* Normalisation set after a trainer evaluated (and trained on) the dataset:
 * its next evaluation uses the new values. The change moves the loss by far
 * more than the tolerance, so a program keeping the old values fails. */
static void test_normalization_change(void **state) {
  kiln_context *ctx = *state;
  kiln_model *model = make_model(ctx);
  kiln_dataset *ds = make_dataset(ctx, 1);
  kiln_trainer *trainer = make_trainer(model);
  kiln_epoch_stats stats = {.struct_size = sizeof stats};
  assert_kiln_ok(kiln_trainer_epoch(trainer, ds, &stats));
  double before = 0, after = 0, accuracy = 0;
  assert_kiln_ok(kiln_trainer_evaluate(trainer, ds, &before, &accuracy));

  assert_kiln_ok(kiln_dataset_set_normalization(ds, 40.0, 3.0, 0.5));
  assert_kiln_ok(kiln_trainer_evaluate(trainer, ds, &after, &accuracy));
  const double want = fresh_loss(model, ds);
  assert_true(fabs(want - before) > 0.1);
  assert_same_loss(after, want);

  kiln_trainer_release(trainer);
  kiln_dataset_release(ds);
  kiln_model_release(model);
}

/* Training after a normalisation change: the same weights as a trainer that
 * resumed the first epoch's checkpoint, and so compiled its programs after
 * the change. Both models start from the same weights (contexts of one seed). */
static void test_normalization_change_training(void **state) {
  (void)state;
  char dir[512], path[600];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/epoch1.ckpt", dir);
  kiln_context *ctx_a = kiln_test_context_create(11), *ctx_b = kiln_test_context_create(11);
  kiln_model *model_a = make_model(ctx_a), *model_b = make_model(ctx_b);
  kiln_dataset *ds_a = make_dataset(ctx_a, 2), *ds_b = make_dataset(ctx_b, 2);
  kiln_trainer *a = make_trainer(model_a);
  kiln_epoch_stats stats = {.struct_size = sizeof stats};

  assert_kiln_ok(kiln_trainer_epoch(a, ds_a, &stats));
  assert_kiln_ok(kiln_trainer_save_checkpoint(a, path));
  assert_kiln_ok(kiln_dataset_set_normalization(ds_a, 2.0, 0.5, 0.25));
  assert_kiln_ok(kiln_trainer_epoch(a, ds_a, &stats));

  kiln_trainer *b = make_trainer(model_b);
  assert_kiln_ok(kiln_trainer_load_checkpoint(b, path));
  assert_kiln_ok(kiln_dataset_set_normalization(ds_b, 2.0, 0.5, 0.25));
  assert_kiln_ok(kiln_trainer_epoch(b, ds_b, &stats));

  for (int64_t i = 0; i < 4; i++) {
    kiln_tensor *pa = NULL, *pb = NULL;
    assert_kiln_ok(kiln_model_parameter(model_a, i, &pa));
    assert_kiln_ok(kiln_model_parameter(model_b, i, &pb));
    int64_t n = 0;
    assert_kiln_ok(kiln_tensor_numel(pa, &n));
    double wa[12 * 6], wb[12 * 6];
    kiln_test_read_f64(pa, wa, n);
    kiln_test_read_f64(pb, wb, n);
    assert_allclose(wa, wb, n, 0, 0);
    kiln_tensor_release(pa);
    kiln_tensor_release(pb);
  }
  kiln_trainer_release(a);
  kiln_trainer_release(b);
  kiln_dataset_release(ds_a);
  kiln_dataset_release(ds_b);
  kiln_model_release(model_a);
  kiln_model_release(model_b);
  kiln_context_release(ctx_a);
  kiln_context_release(ctx_b);
  kiln_test_remove_tree(dir);
}

/* Two splits of one dataset share its data; the validation part gets a
 * normalisation of its own. With 96 samples and fraction 0.125 the parts hold
 * 84 and 12 samples, so batches of 12 rows give both parts programs of one
 * shape over the same feature memory. */
static void test_splits_of_one_dataset(void **state) {
  kiln_context *ctx = *state;
  kiln_model *model = make_model(ctx);
  kiln_dataset *full = make_dataset(ctx, 3), *train = NULL, *val = NULL;
  assert_kiln_ok(kiln_dataset_split(full, 0.125, 5, &train, &val));
  int64_t n_train = 0, n_val = 0;
  assert_kiln_ok(kiln_dataset_size(train, &n_train));
  assert_kiln_ok(kiln_dataset_size(val, &n_val));
  assert_int_equal(n_val, 12);
  assert_int_equal(n_train, 84);
  assert_kiln_ok(kiln_dataset_set_normalization(val, 25.0, -2.0, 0.5));

  kiln_trainer_options *o = NULL;
  kiln_trainer *trainer = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_batch_size(o, 12));
  assert_kiln_ok(kiln_trainer_create(model, o, &trainer));
  kiln_trainer_options_release(o);
  double loss_train = 0, loss_val = 0, accuracy = 0;
  assert_kiln_ok(kiln_trainer_evaluate(trainer, train, &loss_train, &accuracy));
  assert_kiln_ok(kiln_trainer_evaluate(trainer, val, &loss_val, &accuracy));
  assert_same_loss(loss_val, fresh_loss(model, val));
  /* And back: the training part keeps its own (default) normalisation. */
  double again = 0;
  assert_kiln_ok(kiln_trainer_evaluate(trainer, train, &again, &accuracy));
  assert_same_loss(again, loss_train);
  assert_same_loss(loss_train, fresh_loss(model, train));

  kiln_trainer_release(trainer);
  kiln_dataset_release(train);
  kiln_dataset_release(val);
  kiln_dataset_release(full);
  kiln_model_release(model);
}

/* Datasets created and released one after another, each with data of its
 * own: the allocator hands a new dataset the memory of the one released
 * before it, so a program kept for the old one would read the new one's
 * memory with the old one's settings. Each round's normalisation and labels
 * differ. */
static void test_released_dataset_address_reused(void **state) {
  kiln_context *ctx = *state;
  kiln_model *model = make_model(ctx);
  kiln_trainer *trainer = make_trainer(model);
  for (uint64_t round = 0; round < 6; round++) {
    kiln_dataset *ds = make_dataset(ctx, 100 + round);
    assert_kiln_ok(kiln_dataset_set_normalization(ds, 1.0 + 3.0 * (double)round, 0.25 * (double)round, 1.0));
    double loss = 0, accuracy = 0;
    assert_kiln_ok(kiln_trainer_evaluate(trainer, ds, &loss, &accuracy));
    assert_same_loss(loss, fresh_loss(model, ds));
    kiln_dataset_release(ds);
  }
  kiln_trainer_release(trainer);
  kiln_model_release(model);
}

/* Two datasets over one features tensor with different labels: the same
 * feature memory, another dataset. */
static void test_datasets_sharing_features(void **state) {
  kiln_context *ctx = *state;
  kiln_model *model = make_model(ctx);
  float x[SAMPLES * FEATURES];
  int64_t y1[SAMPLES], y2[SAMPLES];
  fill_samples(4, x, y1, SAMPLES);
  for (int64_t i = 0; i < SAMPLES; i++) y2[i] = (y1[i] + 1) % CLASSES;
  const int64_t xs[] = {SAMPLES, FEATURES}, ys[] = {SAMPLES};
  kiln_tensor *xt = kiln_test_tensor_f32(ctx, x, xs, 2, dev), *yt1 = NULL, *yt2 = NULL;
  assert_kiln_ok(kiln_tensor_from_host(ctx, y1, sizeof y1, ys, 1, KILN_I64, dev, &yt1));
  assert_kiln_ok(kiln_tensor_from_host(ctx, y2, sizeof y2, ys, 1, KILN_I64, dev, &yt2));
  kiln_dataset *d1 = NULL, *d2 = NULL;
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, xt, yt1, &d1));
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, xt, yt2, &d2));

  kiln_trainer *trainer = make_trainer(model);
  double l1 = 0, l2 = 0, a1 = 0, a2 = 0;
  assert_kiln_ok(kiln_trainer_evaluate(trainer, d1, &l1, &a1));
  assert_kiln_ok(kiln_trainer_evaluate(trainer, d2, &l2, &a2));
  assert_same_loss(l1, fresh_loss(model, d1));
  assert_same_loss(l2, fresh_loss(model, d2));
  assert_true(fabs(l1 - l2) > 1e-3);

  kiln_trainer_release(trainer);
  kiln_dataset_release(d1);
  kiln_dataset_release(d2);
  kiln_tensor_release(xt);
  kiln_tensor_release(yt1);
  kiln_tensor_release(yt2);
  kiln_model_release(model);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_normalization_change),
      cmocka_unit_test(test_normalization_change_training),
      cmocka_unit_test(test_splits_of_one_dataset),
      cmocka_unit_test(test_released_dataset_address_reused),
      cmocka_unit_test(test_datasets_sharing_features),
  };
  return cmocka_run_group_tests(tests, setup, kiln_test_context_teardown);
}
