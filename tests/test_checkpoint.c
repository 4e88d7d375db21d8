/* Training checkpoints: resuming from one reproduces the uninterrupted run
 * bit for bit, and mismatched or hostile files are refused without changing
 * the trainer. test_checkpoint runs on the CPU; test_checkpoint_cuda
 * (KILN_TEST_DEVICE=cuda, skipped without a device) runs the same cases on
 * cuda:0 alone, where the resumed run must be bit for bit too (the weights'
 * kernels are deterministic on one device; only the loss statistics use
 * atomics). */
#define _GNU_SOURCE /* memmem */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The CPU, or cuda:0 in the KILN_TEST_DEVICE=cuda run; set by the group setup. */
static kiln_device dev = {KILN_DEVICE_CPU, -1};

static int setup(void **state) {
  kiln_test_context_setup(state);
  dev = kiln_test_device(*state);
  return 0;
}

enum { NPARAM = 6 * 12 + 12 + 12 * 3 + 3 };

static kiln_model *make_model(kiln_context *ctx, const char *text) {
  return kiln_test_model_on(ctx, text, dev, KILN_F32);
}

static kiln_trainer *make_trainer(kiln_model *model, kiln_optimizer_kind kind) {
  kiln_trainer_options *o = NULL;
  kiln_trainer *t = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_optimizer(o, kind));
  assert_kiln_ok(kiln_trainer_options_set_lr(o, kind == KILN_OPTIM_SGD ? 0.05 : 0.01));
  assert_kiln_ok(kiln_trainer_options_set_momentum(o, kind == KILN_OPTIM_SGD ? 0.9 : 0));
  assert_kiln_ok(kiln_trainer_options_set_batch_size(o, 16));
  assert_kiln_ok(kiln_trainer_options_set_schedule(o, KILN_LR_STEP, 7, 0.5, 0, 0));
  assert_kiln_ok(kiln_trainer_create(model, o, &t));
  kiln_trainer_options_release(o);
  return t;
}

static kiln_dataset *random_dataset(kiln_context *ctx) {
  kiln_test_rng rng = kiln_test_rng_make(21);
  float x[100 * 6];
  int64_t y[100];
  kiln_test_fill_uniform_f32(&rng, x, 600, -1, 1);
  for (int i = 0; i < 100; ++i) y[i] = (x[6 * i] + x[6 * i + 1] > 0) + (x[6 * i + 2] > 0.5f);
  return kiln_test_dataset(ctx, x, y, 100, 6, dev);
}

static void read_weights(kiln_model *model, float *out) {
  int64_t at = 0;
  for (int64_t i = 0; i < 4; ++i) {
    kiln_tensor *p = NULL;
    int64_t n = 0;
    assert_kiln_ok(kiln_model_parameter(model, i, &p));
    assert_kiln_ok(kiln_tensor_numel(p, &n));
    assert_kiln_ok(kiln_tensor_copy_to_host(p, out + at, n * 4));
    at += n;
    kiln_tensor_release(p);
  }
  assert_int_equal(at, NPARAM);
}

static void epochs(kiln_trainer *t, kiln_dataset *ds, int n) {
  for (int i = 0; i < n; ++i) {
    kiln_epoch_stats s = {sizeof s};
    assert_kiln_ok(kiln_trainer_epoch(t, ds, &s));
  }
}

static void check_resume(kiln_optimizer_kind kind, const char *spec) {
  char dir[512], path[600];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
  float a[NPARAM], b[NPARAM];

  kiln_context *ctx = kiln_test_context_create(3);
  kiln_dataset *ds = random_dataset(ctx);
  kiln_model *model = make_model(ctx, spec);
  kiln_trainer *t = make_trainer(model, kind);
  epochs(t, ds, 2);
  assert_kiln_ok(kiln_trainer_save_checkpoint(t, path));
  epochs(t, ds, 1);
  read_weights(model, a);
  kiln_trainer_release(t);
  kiln_model_release(model);

  /* A fresh context and model (other initial weights, another shuffle seed). */
  kiln_context *ctx2 = kiln_test_context_create(999);
  kiln_dataset *ds2 = random_dataset(ctx2);
  kiln_model *model2 = make_model(ctx2, spec);
  kiln_trainer *t2 = make_trainer(model2, kind);
  assert_kiln_ok(kiln_trainer_load_checkpoint(t2, path));
  int64_t done = 0, steps = 0;
  double lr = 0;
  assert_kiln_ok(kiln_trainer_epochs_done(t2, &done));
  assert_kiln_ok(kiln_trainer_steps_done(t2, &steps));
  assert_kiln_ok(kiln_trainer_current_lr(t2, &lr));
  assert_int_equal(done, 2);
  assert_int_equal(steps, 14); /* 7 batches per epoch */
  double want_lr = (kind == KILN_OPTIM_SGD ? 0.05 : 0.01) * 0.25;
  assert_allclose(&lr, &want_lr, 1, 1e-15, 0);
  epochs(t2, ds2, 1);
  read_weights(model2, b);
  assert_memory_equal(a, b, sizeof a);

  kiln_trainer_release(t2);
  kiln_model_release(model2);
  kiln_dataset_release(ds);
  kiln_dataset_release(ds2);
  kiln_context_release(ctx);
  kiln_context_release(ctx2);
  kiln_test_remove_tree(dir);
}

/* fit's callback for the runs below: a checkpoint after batch 3 of epoch 2,
 * then cancel, when `path` is set; else nothing. */
typedef struct {
  const char *path;
  kiln_trainer *trainer;
} save_within;

static int save_within_epoch(void *user, const kiln_progress *p) {
  save_within *s = user;
  if (!s->path || p->phase != KILN_PROGRESS_BATCH || p->epoch != 2 || p->batch != 3) return 0;
  assert_kiln_ok(kiln_trainer_save_checkpoint(s->trainer, s->path));
  return 1;
}

/* SGD with momentum, a cosine schedule over each fit, a report per batch. */
static kiln_trainer *reporting_trainer(kiln_model *model) {
  kiln_trainer *t = NULL;
  kiln_trainer_options *o = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_lr(o, 0.05));
  assert_kiln_ok(kiln_trainer_options_set_momentum(o, 0.9));
  assert_kiln_ok(kiln_trainer_options_set_batch_size(o, 16));
  assert_kiln_ok(kiln_trainer_options_set_schedule(o, KILN_LR_COSINE, 0, 0, 0, 0.001));
  assert_kiln_ok(kiln_trainer_options_set_progress_interval(o, 1));
  assert_kiln_ok(kiln_trainer_create(model, o, &t));
  kiln_trainer_options_release(o);
  return t;
}

/* A checkpoint written from fit's callback within an epoch finishes that
 * epoch when training resumes: the same order, dropout masks, learning
 * rates (a cosine schedule over the fit) and epoch statistics, so the
 * weights and the history come out bit for bit those of the run that was
 * not interrupted. A step in between starts a new epoch instead. */
static void test_resume_within_an_epoch(void **state) {
  (void)state;
  char dir[512], path[600];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/within.safetensors", dir);
  const char *spec = "6-12-3:dropout=0.25";
  float a[NPARAM], c[NPARAM];

  kiln_context *ctx = kiln_test_context_create(3);
  kiln_dataset *ds = random_dataset(ctx);
  kiln_model *model = make_model(ctx, spec);
  kiln_trainer *t = reporting_trainer(model);
  save_within none = {NULL, t};
  kiln_history *whole = NULL;
  assert_kiln_ok(kiln_trainer_fit(t, ds, NULL, 3, save_within_epoch, &none, &whole));
  read_weights(model, a);
  kiln_trainer_release(t);
  kiln_model_release(model);

  /* The same run from the start (a context of the same seed), cut within
   * epoch 2 by the callback, which writes the checkpoint first. */
  kiln_context *same = kiln_test_context_create(3);
  kiln_dataset *ds_same = random_dataset(same);
  model = make_model(same, spec);
  t = reporting_trainer(model);
  save_within saving = {path, t};
  kiln_history *cut = NULL;
  assert_status(kiln_trainer_fit(t, ds_same, NULL, 3, save_within_epoch, &saving, &cut), KILN_ERROR_CANCELLED);
  kiln_trainer_release(t);
  kiln_model_release(model);

  /* Resumed in another context (other initial weights and shuffle seed),
   * from the checkpoint loaded and saved again before any training (as a
   * job's preemption hook may): the position within the epoch goes with it. */
  kiln_context *other = kiln_test_context_create(999);
  kiln_dataset *ds2 = random_dataset(other);
  char saved_again[640];
  snprintf(saved_again, sizeof saved_again, "%s/saved-again.safetensors", dir);
  model = make_model(other, spec);
  t = reporting_trainer(model);
  assert_kiln_ok(kiln_trainer_load_checkpoint(t, path));
  assert_kiln_ok(kiln_trainer_save_checkpoint(t, saved_again));
  kiln_trainer_release(t);
  kiln_model_release(model);
  model = make_model(other, spec);
  t = reporting_trainer(model);
  assert_kiln_ok(kiln_trainer_load_checkpoint(t, saved_again));
  int64_t done = 0, steps = 0;
  assert_kiln_ok(kiln_trainer_epochs_done(t, &done));
  assert_kiln_ok(kiln_trainer_steps_done(t, &steps));
  assert_int_equal(done, 1);
  assert_int_equal(steps, 7 + 3);
  kiln_history *rest = NULL;
  assert_kiln_ok(kiln_trainer_fit(t, ds2, NULL, 2, NULL, NULL, &rest));
  read_weights(model, c);
  assert_memory_equal(a, c, sizeof a);
  assert_kiln_ok(kiln_trainer_steps_done(t, &steps));
  assert_int_equal(steps, 21);
  for (int64_t e = 0; e < 2; ++e) {
    kiln_epoch_stats want = {sizeof want}, got = {sizeof got};
    assert_kiln_ok(kiln_history_get(whole, e + 1, &want));
    assert_kiln_ok(kiln_history_get(rest, e, &got));
    assert_memory_equal(&got.train_loss, &want.train_loss, sizeof want.train_loss);
    assert_memory_equal(&got.train_accuracy, &want.train_accuracy, sizeof want.train_accuracy);
  }
  kiln_history_release(rest);
  kiln_trainer_release(t);
  kiln_model_release(model);

  /* A step in between: the next epoch is a new one, all 7 of its batches
   * (a step schedule here: the cosine one spans a fit). */
  model = make_model(other, spec);
  t = make_trainer(model, KILN_OPTIM_SGD);
  assert_kiln_ok(kiln_trainer_load_checkpoint(t, path));
  const int64_t xs[] = {2, 6}, ys[] = {2};
  kiln_tensor *x = NULL, *y = NULL;
  assert_kiln_ok(kiln_tensor_zeros(other, xs, 2, KILN_F32, dev, &x));
  assert_kiln_ok(kiln_tensor_zeros(other, ys, 1, KILN_I64, dev, &y));
  assert_kiln_ok(kiln_trainer_step(t, x, y, NULL));
  kiln_epoch_stats s = {sizeof s};
  assert_kiln_ok(kiln_trainer_epoch(t, ds2, &s));
  assert_kiln_ok(kiln_trainer_steps_done(t, &steps));
  assert_int_equal(steps, 7 + 3 + 1 + 7);
  kiln_tensor_release(x);
  kiln_tensor_release(y);
  kiln_trainer_release(t);
  kiln_model_release(model);

  kiln_history_release(whole);
  kiln_dataset_release(ds);
  kiln_dataset_release(ds_same);
  kiln_dataset_release(ds2);
  kiln_context_release(ctx);
  kiln_context_release(same);
  kiln_context_release(other);
  kiln_test_remove_tree(dir);
}

static void test_resume_is_exact(void **state) {
  (void)state;
  check_resume(KILN_OPTIM_SGD, "6-12-3:dropout=0.25");
  check_resume(KILN_OPTIM_ADAM, "6-12-3");
  check_resume(KILN_OPTIM_ADAMW, "6-12-3:gelu");
}

static void test_mismatched_checkpoints(void **state) {
  kiln_context *ctx = *state;
  char dir[512], path[600], bad[600];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
  snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
  kiln_dataset *ds = random_dataset(ctx);
  kiln_model *model = make_model(ctx, "6-12-3");
  kiln_trainer *t = make_trainer(model, KILN_OPTIM_ADAM);
  epochs(t, ds, 1);
  assert_kiln_ok(kiln_trainer_save_checkpoint(t, path));

  /* Another architecture. */
  kiln_model *other = make_model(ctx, "6-10-3");
  kiln_trainer *to = make_trainer(other, KILN_OPTIM_ADAM);
  float before[6 * 10];
  kiln_tensor *w = NULL;
  assert_kiln_ok(kiln_model_parameter(other, 0, &w));
  assert_kiln_ok(kiln_tensor_copy_to_host(w, before, sizeof before));
  assert_status(kiln_trainer_load_checkpoint(to, path), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("was written for the model 6-12-3 but this trainer's model is 6-10-3");
  float after[6 * 10];
  assert_kiln_ok(kiln_tensor_copy_to_host(w, after, sizeof after));
  assert_memory_equal(before, after, sizeof before);
  int64_t steps = -1;
  assert_kiln_ok(kiln_trainer_steps_done(to, &steps));
  assert_int_equal(steps, 0);
  kiln_tensor_release(w);

  /* Another optimizer kind. */
  kiln_model *same = make_model(ctx, "6-12-3");
  kiln_trainer *ts = make_trainer(same, KILN_OPTIM_SGD);
  assert_status(kiln_trainer_load_checkpoint(ts, path), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("adam");

  /* A model file is not a checkpoint; truncated and missing files. */
  assert_kiln_ok(kiln_model_save(same, bad));
  assert_status(kiln_trainer_load_checkpoint(ts, bad), KILN_ERROR_FORMAT);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  static char buf[1 << 16];
  size_t size = fread(buf, 1, sizeof buf, f);
  fclose(f);
  for (size_t cut = 7; cut < size; cut += size / 5) {
    f = fopen(bad, "wb");
    fwrite(buf, 1, cut, f);
    fclose(f);
    assert_status(kiln_trainer_load_checkpoint(t, bad), KILN_ERROR_FORMAT);
  }
  /* A zip archive (what torch.save writes) and an empty file are told as such. */
  f = fopen(bad, "wb");
  fwrite("PK\x03\x04\x14\x00\x00\x08\x00\x00", 1, 10, f);
  fclose(f);
  assert_status(kiln_trainer_load_checkpoint(t, bad), KILN_ERROR_FORMAT);
  assert_last_error_contains("is a torch.save file (a zip archive), not safetensors");
  f = fopen(bad, "wb");
  fclose(f);
  assert_status(kiln_trainer_load_checkpoint(t, bad), KILN_ERROR_FORMAT);
  assert_last_error_contains("is empty (0 bytes)");
  /* Garbage metadata: a counter that is not a number. */
  char *meta = memmem(buf, size, "\"steps_done\":\"", 14);
  assert_non_null(meta);
  meta[14] = 'x';
  f = fopen(bad, "wb");
  fwrite(buf, 1, size, f);
  fclose(f);
  assert_status(kiln_trainer_load_checkpoint(t, bad), KILN_ERROR_FORMAT);
  assert_last_error_contains("steps_done");
  assert_kiln_ok(kiln_trainer_steps_done(t, &steps));
  assert_int_equal(steps, 7); /* the failed loads changed nothing */
  snprintf(bad, sizeof bad, "%s/missing", dir);
  assert_status(kiln_trainer_load_checkpoint(ts, bad), KILN_ERROR_IO);
  assert_status(kiln_trainer_load_checkpoint(ts, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_save_checkpoint(NULL, path), KILN_ERROR_INVALID_ARGUMENT);

  kiln_trainer_release(ts);
  kiln_trainer_release(to);
  kiln_trainer_release(t);
  kiln_model_release(same);
  kiln_model_release(other);
  kiln_model_release(model);
  kiln_dataset_release(ds);
  kiln_test_remove_tree(dir);
}

/* A trainer of 6-12-3 with optimizer kind (SGD with momentum `momentum`;
 * 0: no momentum state), lr 0.05, batch 16, weights from context seed 3 and
 * shuffle seed 4; its model in *model. */
static kiln_trainer *seeded_trainer(kiln_context *ctx, kiln_optimizer_kind kind, double momentum, kiln_model **model) {
  assert_kiln_ok(kiln_context_set_seed(ctx, 3));
  *model = make_model(ctx, "6-12-3");
  kiln_trainer_options *o = NULL;
  kiln_trainer *t = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_optimizer(o, kind));
  assert_kiln_ok(kiln_trainer_options_set_lr(o, 0.05));
  assert_kiln_ok(kiln_trainer_options_set_momentum(o, momentum));
  assert_kiln_ok(kiln_trainer_options_set_batch_size(o, 16));
  assert_kiln_ok(kiln_trainer_options_set_shuffle_seed(o, 4));
  assert_kiln_ok(kiln_trainer_create(*model, o, &t));
  kiln_trainer_options_release(o);
  return t;
}

/* Fails unless a and b (trained alike) hold the same weights and counters
 * to the bit, and stay so over another epoch (which needs the same
 * optimizer state and shuffle generator). */
static void assert_same_trainers(kiln_trainer *a, kiln_model *ma, kiln_trainer *b, kiln_model *mb, kiln_dataset *ds) {
  float wa[NPARAM], wb[NPARAM];
  for (int round = 0; round < 2; ++round) {
    read_weights(ma, wa);
    read_weights(mb, wb);
    assert_memory_equal(wa, wb, sizeof wa);
    int64_t sa = 0, sb = 0, ea = 0, eb = 0;
    assert_kiln_ok(kiln_trainer_steps_done(a, &sa));
    assert_kiln_ok(kiln_trainer_steps_done(b, &sb));
    assert_kiln_ok(kiln_trainer_epochs_done(a, &ea));
    assert_kiln_ok(kiln_trainer_epochs_done(b, &eb));
    assert_int_equal(sa, sb);
    assert_int_equal(ea, eb);
    if (round == 0) {
      epochs(a, ds, 1);
      epochs(b, ds, 1);
    }
  }
}

/* A checkpoint of another optimizer kind is refused, naming the difference,
 * and the refused trainer goes on exactly as its twin that never tried:
 * Adam and AdamW keep the same tensors but update them otherwise. */
static void test_other_optimizer_kind_is_refused(void **state) {
  kiln_context *ctx = *state;
  char dir[512], path[600];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
  kiln_dataset *ds = random_dataset(ctx);
  const struct {
    kiln_optimizer_kind writer_kind, kind;
    double writer_momentum, momentum;
    kiln_status status;
    const char *message;
  } cases[] = {
      {KILN_OPTIM_ADAM, KILN_OPTIM_ADAMW, 0, 0, KILN_ERROR_INVALID_ARGUMENT,
       "holds the state of the adam optimizer but this trainer uses adamw"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    kiln_model *writer_model = NULL, *model = NULL, *twin_model = NULL;
    kiln_trainer *writer = seeded_trainer(ctx, cases[c].writer_kind, cases[c].writer_momentum, &writer_model);
    epochs(writer, ds, 2);
    assert_kiln_ok(kiln_trainer_save_checkpoint(writer, path));
    kiln_trainer *t = seeded_trainer(ctx, cases[c].kind, cases[c].momentum, &model);
    kiln_trainer *twin = seeded_trainer(ctx, cases[c].kind, cases[c].momentum, &twin_model);
    epochs(t, ds, 1);
    epochs(twin, ds, 1);
    assert_status(kiln_trainer_load_checkpoint(t, path), cases[c].status);
    assert_last_error_contains(cases[c].message);
    assert_same_trainers(t, model, twin, twin_model, ds);
    kiln_trainer_release(writer);
    kiln_trainer_release(t);
    kiln_trainer_release(twin);
    kiln_model_release(writer_model);
    kiln_model_release(model);
    kiln_model_release(twin_model);
  }
  kiln_dataset_release(ds);
  kiln_test_remove_tree(dir);
}

/* Replaces the first `from` in the file at path with `to`, of its length. */
static void rename_in_file(const char *path, const char *from, const char *to) {
  static char file[1 << 16];
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  const size_t size = fread(file, 1, sizeof file, f);
  fclose(f);
  assert_true(size > 0 && size < sizeof file && strlen(from) == strlen(to));
  char *at = memmem(file, size, from, strlen(from));
  assert_non_null(at);
  memcpy(at, to, strlen(to));
  f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(file, 1, size, f), size);
  assert_int_equal(fclose(f), 0);
}

/* Runs n steps of the same batch of 16 samples of ds's kind. */
static void same_steps(kiln_context *ctx, kiln_trainer *t, int n) {
  kiln_test_rng rng = kiln_test_rng_make(5);
  float x[16 * 6];
  int64_t y[16];
  kiln_test_fill_uniform_f32(&rng, x, 16 * 6, -1, 1);
  for (int i = 0; i < 16; ++i) y[i] = i % 3;
  const int64_t xs[] = {16, 6}, ys[] = {16};
  kiln_tensor *xt = NULL, *yt = NULL;
  assert_kiln_ok(kiln_tensor_from_host(ctx, x, sizeof x, xs, 2, KILN_F32, dev, &xt));
  assert_kiln_ok(kiln_tensor_from_host(ctx, y, sizeof y, ys, 1, KILN_I64, dev, &yt));
  for (int i = 0; i < n; ++i) assert_kiln_ok(kiln_trainer_step(t, xt, yt, NULL));
  kiln_tensor_release(xt);
  kiln_tensor_release(yt);
}

/* Momentum is the trainer's own option, as kiln.h says of every option, not
 * the file's: SGD's checkpoint of a run with momentum loads into a trainer
 * without (which leaves the buffers unread and goes on exactly as its twin
 * that trained alike and took the same weights), and one without momentum
 * into a trainer with (whose buffers start at zero: its steps are then
 * those of a fresh trainer with momentum from the same weights, whose first
 * update makes its buffer the gradient, as torch.optim's does). A file with
 * part of the buffers is still refused. */
static void test_momentum_is_the_trainers_own(void **state) {
  kiln_context *ctx = *state;
  char dir[512], path[600], weights[600];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
  snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
  kiln_dataset *ds = random_dataset(ctx);
  for (int with_momentum = 0; with_momentum < 2; ++with_momentum) {
    const double writer_momentum = with_momentum ? 0 : 0.9, momentum = with_momentum ? 0.9 : 0;
    kiln_model *writer_model = NULL, *model = NULL, *twin_model = NULL;
    kiln_trainer *writer = seeded_trainer(ctx, KILN_OPTIM_SGD, writer_momentum, &writer_model);
    epochs(writer, ds, 2);
    assert_kiln_ok(kiln_trainer_save_checkpoint(writer, path));
    assert_kiln_ok(kiln_model_save(writer_model, weights));
    kiln_trainer *t = seeded_trainer(ctx, KILN_OPTIM_SGD, momentum, &model);
    assert_kiln_ok(kiln_trainer_load_checkpoint(t, path));
    kiln_trainer *twin = seeded_trainer(ctx, KILN_OPTIM_SGD, momentum, &twin_model);
    if (!with_momentum) epochs(twin, ds, 2); /* the same counters and shuffles */
    assert_kiln_ok(kiln_model_load_weights(twin_model, weights));
    if (with_momentum) {
      same_steps(ctx, t, 3);
      same_steps(ctx, twin, 3);
      float a[NPARAM], b[NPARAM];
      read_weights(model, a);
      read_weights(twin_model, b);
      assert_memory_equal(a, b, sizeof a);
    } else {
      assert_same_trainers(t, model, twin, twin_model, ds);
    }
    kiln_trainer_release(writer);
    kiln_trainer_release(t);
    kiln_trainer_release(twin);
    kiln_model_release(writer_model);
    kiln_model_release(model);
    kiln_model_release(twin_model);
  }
  /* Three of the four buffers (the first renamed): refused by a trainer
   * with momentum for the one missing, by one without for the stray name,
   * either going on exactly as its twin that never tried (both at other
   * counters than the file's). */
  kiln_model *writer_model = NULL, *model = NULL, *twin_model = NULL;
  kiln_trainer *writer = seeded_trainer(ctx, KILN_OPTIM_SGD, 0.9, &writer_model);
  epochs(writer, ds, 1);
  assert_kiln_ok(kiln_trainer_save_checkpoint(writer, path));
  rename_in_file(path, "optimizer.momentum_buffer.0.weight", "optimizer.momentum_buffer_0.weight");
  for (int with_momentum = 0; with_momentum < 2; ++with_momentum) {
    kiln_trainer *t = seeded_trainer(ctx, KILN_OPTIM_SGD, with_momentum ? 0.9 : 0, &model);
    kiln_trainer *twin = seeded_trainer(ctx, KILN_OPTIM_SGD, with_momentum ? 0.9 : 0, &twin_model);
    epochs(t, ds, 2);
    epochs(twin, ds, 2);
    assert_status(kiln_trainer_load_checkpoint(t, path), KILN_ERROR_SHAPE_MISMATCH);
    assert_last_error_contains(with_momentum ? "has no tensor \"optimizer.momentum_buffer.0.weight\""
                                             : "it has \"optimizer.momentum_buffer_0.weight\", which is no "
                                               "parameter or optimizer state of this trainer");
    assert_same_trainers(t, model, twin, twin_model, ds);
    kiln_trainer_release(t);
    kiln_trainer_release(twin);
    kiln_model_release(model);
    kiln_model_release(twin_model);
  }
  kiln_trainer_release(writer);
  kiln_model_release(writer_model);
  kiln_dataset_release(ds);
  kiln_test_remove_tree(dir);
}

/* Copies the checkpoint `from` to `to` with metadata `key` set to `value`
 * (the header rebuilt around it, padded to 8 bytes again). */
static void set_metadata(const char *from, const char *to, const char *key, const char *value) {
  FILE *in = fopen(from, "rb");
  assert_non_null(in);
  static char file[1 << 16], header[1 << 16];
  const size_t size = fread(file, 1, sizeof file, in);
  fclose(in);
  assert_true(size > 8 && size < sizeof file);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | (unsigned char)file[i];
  char field[64];
  snprintf(field, sizeof field, "\"%s\":\"", key);
  char *at = memmem(file + 8, len, field, strlen(field));
  assert_non_null(at);
  char *start = at + strlen(field), *end = memchr(start, '"', (size_t)(file + 8 + len - start));
  assert_non_null(end);
  int n = snprintf(header, sizeof header, "%.*s%s%.*s", (int)(start - (file + 8)), file + 8, value,
                   (int)(file + 8 + len - end), end);
  while (n > 0 && header[n - 1] == ' ') --n; /* the old padding */
  while (n % 8) header[n++] = ' ';
  FILE *out = fopen(to, "wb");
  assert_non_null(out);
  unsigned char new_len[8];
  for (int i = 0; i < 8; ++i) new_len[i] = (unsigned char)((uint64_t)n >> (8 * i));
  fwrite(new_len, 1, 8, out);
  fwrite(header, 1, (size_t)n, out);
  fwrite(file + 8 + len, 1, size - 8 - len, out);
  assert_int_equal(fclose(out), 0);
}

/* Counters are below 2^62 (kiln.h), so that training can go on counting in
 * int64: 2^62 - 1 resumes, 2^62 itself is FORMAT (it used to be taken). */
static void test_counter_limits(void **state) {
  kiln_context *ctx = *state;
  char dir[512], path[700], edited[700];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
  snprintf(edited, sizeof edited, "%s/edited.safetensors", dir);
  kiln_model *model = make_model(ctx, "6-12-3");
  kiln_trainer *t = make_trainer(model, KILN_OPTIM_SGD);
  assert_kiln_ok(kiln_trainer_save_checkpoint(t, path));
  const char *keys[] = {"epochs_done", "steps_done", "optimizer_steps"};
  for (size_t k = 0; k < 3; ++k) {
    set_metadata(path, edited, keys[k], "4611686018427387904"); /* 2^62 */
    assert_status(kiln_trainer_load_checkpoint(t, edited), KILN_ERROR_FORMAT);
    assert_last_error_contains(keys[k]);
    assert_last_error_contains("not below 2^62");
    int64_t steps = -1;
    assert_kiln_ok(kiln_trainer_steps_done(t, &steps));
    assert_int_equal(steps, 0); /* unchanged */
  }
  set_metadata(path, edited, "steps_done", "4611686018427387903"); /* 2^62 - 1 */
  assert_kiln_ok(kiln_trainer_load_checkpoint(t, edited));
  int64_t steps = 0;
  assert_kiln_ok(kiln_trainer_steps_done(t, &steps));
  assert_int_equal(steps, ((int64_t)1 << 62) - 1);
  /* There the next step, or epoch, would count 2^62: refused before it
   * changes anything, as fit refuses too many epochs. */
  kiln_dataset *ds = random_dataset(ctx);
  kiln_epoch_stats stats = {sizeof stats};
  assert_status(kiln_trainer_epoch(t, ds, &stats), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("limit of kiln's counters");
  kiln_history *h = NULL;
  assert_status(kiln_trainer_fit(t, ds, NULL, 1, NULL, NULL, &h), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(h);
  const int64_t xs[] = {2, 6}, ys[] = {2};
  kiln_tensor *x = NULL, *y = NULL;
  assert_kiln_ok(kiln_tensor_zeros(ctx, xs, 2, KILN_F32, dev, &x));
  assert_kiln_ok(kiln_tensor_zeros(ctx, ys, 1, KILN_I64, dev, &y));
  double loss = 1;
  assert_status(kiln_trainer_step(t, x, y, &loss), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("limit of kiln's counters");
  assert_kiln_ok(kiln_trainer_steps_done(t, &steps));
  assert_int_equal(steps, ((int64_t)1 << 62) - 1);
  /* One step below it, the last step is taken. */
  set_metadata(path, edited, "steps_done", "4611686018427387902"); /* 2^62 - 2 */
  assert_kiln_ok(kiln_trainer_load_checkpoint(t, edited));
  assert_kiln_ok(kiln_trainer_step(t, x, y, &loss));
  assert_kiln_ok(kiln_trainer_steps_done(t, &steps));
  assert_int_equal(steps, ((int64_t)1 << 62) - 1);
  kiln_tensor_release(x);
  kiln_tensor_release(y);
  kiln_dataset_release(ds);
  kiln_trainer_release(t);
  kiln_model_release(model);
  kiln_test_remove_tree(dir);
}

/* Metadata a kiln checkpoint could not hold is FORMAT, and the trainer is
 * unchanged: a counter with a sign or a space before its digits (strtoull
 * takes both), counters that do not fit each other (every optimizer update
 * and every epoch takes steps), an optimizer kiln does not know (not a
 * mismatch with the trainer's), a spec that is not one. After one epoch of
 * 100 samples in batches of 16 the file counts 7 steps, 7 updates, 1 epoch. */
static void test_metadata_is_checked(void **state) {
  kiln_context *ctx = *state;
  char dir[512], path[700], edited[700];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
  snprintf(edited, sizeof edited, "%s/edited.safetensors", dir);
  kiln_dataset *ds = random_dataset(ctx);
  kiln_model *writer_model = make_model(ctx, "6-12-3");
  kiln_trainer *writer = make_trainer(writer_model, KILN_OPTIM_SGD);
  epochs(writer, ds, 1);
  assert_kiln_ok(kiln_trainer_save_checkpoint(writer, path));
  kiln_model *model = make_model(ctx, "6-12-3");
  kiln_trainer *t = make_trainer(model, KILN_OPTIM_SGD);
  float before[NPARAM], after[NPARAM];
  read_weights(model, before);
  const struct {
    const char *key, *value, *message;
  } bad[] = {
      {"steps_done", " 7", "not an unsigned integer"},
      {"steps_done", "+7", "not an unsigned integer"},
      {"optimizer_steps", "-0", "not an unsigned integer"},
      {"optimizer_steps", "8", "counters do not fit each other: 7 steps, 8 optimizer updates and 1 epochs"},
      {"epochs_done", "8", "counters do not fit each other: 7 steps, 7 optimizer updates and 8 epochs"},
      {"optimizer", "rmsprop", "metadata \"optimizer\" is \"rmsprop\", not one of sgd|adam|adamw"},
      {"kiln.spec", "6-x-3", "metadata \"kiln.spec\" is \"6-x-3\", which is not a model spec"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    set_metadata(path, edited, bad[i].key, bad[i].value);
    assert_status(kiln_trainer_load_checkpoint(t, edited), KILN_ERROR_FORMAT);
    assert_last_error_contains(bad[i].message);
    int64_t steps = -1;
    assert_kiln_ok(kiln_trainer_steps_done(t, &steps));
    assert_int_equal(steps, 0);
    read_weights(model, after);
    assert_memory_equal(before, after, sizeof before);
  }
  /* Fewer updates than steps, and no epoch finished, fit. */
  set_metadata(path, edited, "optimizer_steps", "3");
  set_metadata(edited, edited, "epochs_done", "0");
  assert_kiln_ok(kiln_trainer_load_checkpoint(t, edited));
  int64_t steps = 0, epochs_done = -1;
  assert_kiln_ok(kiln_trainer_steps_done(t, &steps));
  assert_kiln_ok(kiln_trainer_epochs_done(t, &epochs_done));
  assert_int_equal(steps, 7);
  assert_int_equal(epochs_done, 0);

  kiln_trainer_release(t);
  kiln_trainer_release(writer);
  kiln_model_release(model);
  kiln_model_release(writer_model);
  kiln_dataset_release(ds);
  kiln_test_remove_tree(dir);
}

/* A checkpoint written within an epoch carries the epoch's statistics so
 * far; ones that its samples seen could not give are FORMAT, and the
 * trainer is unchanged. Cut after 3 batches of 16, 48 samples were seen:
 * 48 of them right is taken, 49 is not. (Taken, 2^61 right made the
 * resumed epoch's accuracy 2.3e17, and a bad label counted the whole
 * epoch trained before INVALID_ARGUMENT.) */
static void test_statistics_within_an_epoch(void **state) {
  kiln_context *ctx = *state;
  char dir[512], path[700], edited[700];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/within.safetensors", dir);
  snprintf(edited, sizeof edited, "%s/edited.safetensors", dir);
  kiln_dataset *ds = random_dataset(ctx);
  kiln_model *model = make_model(ctx, "6-12-3");
  kiln_trainer *t = reporting_trainer(model);
  save_within saving = {path, t};
  kiln_history *cut = NULL;
  assert_status(kiln_trainer_fit(t, ds, NULL, 3, save_within_epoch, &saving, &cut), KILN_ERROR_CANCELLED);
  kiln_trainer_release(t);

  t = reporting_trainer(model);
  const struct {
    const char *key, *value;
  } bad[] = {{"epoch_correct", "49"},     {"epoch_correct", "2305843009213693952"},
             {"epoch_correct", "-1"},     {"epoch_correct", "2.5"},
             {"epoch_bad_labels", "1"},   {"epoch_loss_sum", "-0.5"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    set_metadata(path, edited, bad[i].key, bad[i].value);
    assert_status(kiln_trainer_load_checkpoint(t, edited), KILN_ERROR_FORMAT);
    assert_last_error_contains("do not fit 48 samples seen");
    int64_t steps = -1;
    assert_kiln_ok(kiln_trainer_steps_done(t, &steps));
    assert_int_equal(steps, 0);
  }
  set_metadata(path, edited, "epoch_correct", "48");
  assert_kiln_ok(kiln_trainer_load_checkpoint(t, edited));
  kiln_history *rest = NULL;
  assert_kiln_ok(kiln_trainer_fit(t, ds, NULL, 1, NULL, NULL, &rest));
  kiln_epoch_stats s = {sizeof s};
  assert_kiln_ok(kiln_history_get(rest, 0, &s));
  assert_true(s.train_accuracy >= 0.48 && s.train_accuracy <= 1);
  kiln_history_release(rest);

  kiln_trainer_release(t);
  kiln_model_release(model);
  kiln_dataset_release(ds);
  kiln_test_remove_tree(dir);
}

/* The architecture is the file's kiln.spec, not only its tensors' shapes:
 * 6-12-3 with ReLU does not resume as 6-12-3:tanh. A file whose spec says
 * the trainer's own is still checked tensor by tensor. */
static void test_architecture_is_checked(void **state) {
  kiln_context *ctx = *state;
  char dir[512], path[700], edited[700];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
  snprintf(edited, sizeof edited, "%s/edited.safetensors", dir);
  kiln_model *relu = make_model(ctx, "6-12-3");
  kiln_trainer *t = make_trainer(relu, KILN_OPTIM_SGD);
  assert_kiln_ok(kiln_trainer_save_checkpoint(t, path));

  kiln_model *tanh_model = make_model(ctx, "6-12-3:tanh");
  kiln_trainer *tt = make_trainer(tanh_model, KILN_OPTIM_SGD);
  float before[12 * 6], after[12 * 6];
  kiln_tensor *w = NULL;
  assert_kiln_ok(kiln_model_parameter(tanh_model, 0, &w));
  assert_kiln_ok(kiln_tensor_copy_to_host(w, before, sizeof before));
  assert_status(kiln_trainer_load_checkpoint(tt, path), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("but this trainer's model is 6-12-3:tanh");
  assert_kiln_ok(kiln_tensor_copy_to_host(w, after, sizeof after));
  assert_memory_equal(before, after, sizeof before);
  kiln_tensor_release(w);

  kiln_model *narrow = make_model(ctx, "6-10-3");
  kiln_trainer *tn = make_trainer(narrow, KILN_OPTIM_SGD);
  set_metadata(path, edited, "kiln.spec", "6-10-3");
  assert_status(kiln_trainer_load_checkpoint(tn, edited), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("0.weight");
  /* And its own spec back, the file loads. */
  set_metadata(path, edited, "kiln.spec", "6-12-3");
  assert_kiln_ok(kiln_trainer_load_checkpoint(t, edited));

  kiln_trainer_release(tn);
  kiln_trainer_release(tt);
  kiln_trainer_release(t);
  kiln_model_release(narrow);
  kiln_model_release(tanh_model);
  kiln_model_release(relu);
  kiln_test_remove_tree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_resume_is_exact),
      cmocka_unit_test(test_resume_within_an_epoch),
      cmocka_unit_test(test_mismatched_checkpoints),
      cmocka_unit_test(test_other_optimizer_kind_is_refused),
      cmocka_unit_test(test_momentum_is_the_trainers_own),
      cmocka_unit_test(test_counter_limits),
      cmocka_unit_test(test_metadata_is_checked),
      cmocka_unit_test(test_statistics_within_an_epoch),
      cmocka_unit_test(test_architecture_is_checked),
  };
  return cmocka_run_group_tests(tests, setup, kiln_test_context_teardown);
}
