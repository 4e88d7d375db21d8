/*
 * Communicators in one process, no mpirun: argument checks, a job of one rank
 * (MPI's singleton start), and a missing plugin. The multi-rank behaviour is
 * tests/dist_test.c's, under mpirun.
 *
 * CTest runs this program three times: as test_communicator (libkiln_dist.so
 * next to libkiln), as test_communicator_no_plugin, with KILN_BACKEND_PATH at
 * a directory without it and KILN_TEST_NO_DIST_PLUGIN=1, and as
 * test_communicator_cuda, the GPU twin (skipped without a GPU): DDP inside one
 * process over a local NCCL communicator of cuda:0. Where the plugin was
 * built with NCCL but without MPI, the plain run has
 * KILN_TEST_DIST_WITHOUT_MPI=1 and checks create_mpi's refusal instead.
 */
#include "support.h"

#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "kiln/build_id.hpp" /* KILN_BUILD_ID, which the loader names when it refuses another build */

static const kiln_device kCpu = {KILN_DEVICE_CPU, -1};

/* KILN_BACKEND_PATH holds a libkiln_dist.so of another build
 * (test_communicator_other_build), which the loader refuses. */
static int other_build_plugin(void) { return getenv("KILN_TEST_OTHER_BUILD_DIST_PLUGIN") != NULL; }
static int no_plugin(void) { return getenv("KILN_TEST_NO_DIST_PLUGIN") != NULL || other_build_plugin(); }
/* A plugin built with NCCL but without MPI (tests/CMakeLists.txt). */
static int no_mpi(void) { return getenv("KILN_TEST_DIST_WITHOUT_MPI") != NULL; }

/* The CPU cases; the _cuda twin runs only the GPU one (support.h). */
static int cpu_cases(void) { return !kiln_test_cuda_run(); }

static void test_null_arguments(void **state) {
  if (!cpu_cases()) skip();
  kiln_context *ctx = *state;
  kiln_communicator *comm = (kiln_communicator *)ctx; /* overwritten with NULL on failure */
  int64_t v = 0;
  assert_status(kiln_communicator_create_mpi(NULL, &comm), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(comm);
  assert_status(kiln_communicator_create_mpi(ctx, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_communicator_rank(NULL, &v), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_communicator_size((const kiln_communicator *)ctx, &v), KILN_ERROR_INVALID_HANDLE);
  assert_status(kiln_communicator_set_timeout(NULL, 1), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_attach_communicator(NULL, NULL), KILN_ERROR_INVALID_ARGUMENT);
  kiln_communicator_release(NULL); /* a no-op */
  assert_int_equal(strcmp(kiln_status_name(KILN_ERROR_COMMUNICATION), "KILN_ERROR_COMMUNICATION"), 0);
}

static void test_missing_plugin_is_device_unavailable(void **state) {
  if (!no_plugin() || other_build_plugin() || !cpu_cases()) skip();
  kiln_communicator *comm = NULL;
  assert_status(kiln_communicator_create_mpi(*state, &comm), KILN_ERROR_DEVICE_UNAVAILABLE);
  assert_last_error_contains("libkiln_dist.so");
  assert_null(comm);
}

static void test_plugin_without_mpi_is_device_unavailable(void **state) {
  if (!no_mpi() || !cpu_cases()) skip();
  kiln_communicator *comm = NULL;
  assert_status(kiln_communicator_create_mpi(*state, &comm), KILN_ERROR_DEVICE_UNAVAILABLE);
  assert_last_error_contains("built without MPI");
  assert_null(comm);
}

/* A plugin linked against another build's libkiln needs that build's private
 * version node: refused before any of its code runs, naming this libkiln's
 * build ID. */
static void test_plugin_of_another_build(void **state) {
  if (!other_build_plugin() || !cpu_cases()) skip();
  kiln_communicator *comm = NULL;
  assert_status(kiln_communicator_create_mpi(*state, &comm), KILN_ERROR_DEVICE_UNAVAILABLE);
  assert_last_error_contains("libkiln_dist.so");
  assert_last_error_contains("KILN_PRIVATE_0123456789abcdef"); /* the node the plugin needs: its build */
  assert_last_error_contains("it is from another build of kiln, this libkiln's build ID is " KILN_BUILD_ID);
  assert_null(comm);
  kiln_device gpu = {KILN_DEVICE_CUDA, 0};
  kiln_communicator *local = NULL;
  assert_int_not_equal(kiln_communicator_create_local(*state, &gpu, 1, &local), KILN_OK);
  assert_null(local);
}

/* n samples (n <= kMaxSamples) for make_trainer's 6-8-3 model on dev, drawn
 * from seed: features x [n, 6] in [-1, 1) (f32), labels y [n] in [0, 3)
 * (i64). The caller releases both. */
enum { kMaxSamples = 256 };
static void random_samples(kiln_context *ctx, uint64_t seed, int64_t n, kiln_device dev, kiln_tensor **x,
                           kiln_tensor **y) {
  assert_true(n <= kMaxSamples);
  kiln_test_rng rng = kiln_test_rng_make(seed);
  float xs[kMaxSamples * 6];
  int64_t ys[kMaxSamples];
  for (int64_t i = 0; i < n * 6; ++i) xs[i] = (float)kiln_test_rng_uniform(&rng, -1, 1);
  for (int64_t i = 0; i < n; ++i) ys[i] = (int64_t)(kiln_test_rng_next(&rng) % 3);
  const int64_t xshape[2] = {n, 6}, yshape[1] = {n};
  *x = kiln_test_tensor_f32(ctx, xs, xshape, 2, dev);
  assert_kiln_ok(kiln_tensor_from_host(ctx, ys, n * (int64_t)sizeof ys[0], yshape, 1, KILN_I64, dev, y));
}

/* A trainer of `model` with a fixed shuffle seed: trainers compared with each
 * other must see the same order (unset, the seed is drawn from the context,
 * and differs from trainer to trainer). */
static kiln_trainer *trainer_of(kiln_model *model) {
  kiln_trainer_options *o = NULL;
  kiln_trainer *t = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_batch_size(o, 16));
  assert_kiln_ok(kiln_trainer_options_set_momentum(o, 0.9));
  assert_kiln_ok(kiln_trainer_options_set_shuffle_seed(o, 3));
  assert_kiln_ok(kiln_trainer_create(model, o, &t));
  kiln_trainer_options_release(o);
  return t;
}

static kiln_trainer *make_trainer(kiln_context *ctx, kiln_model **model) {
  assert_kiln_ok(kiln_context_set_seed(ctx, 5));
  *model = kiln_test_model(ctx, "6-8-3");
  return trainer_of(*model);
}

/* Fails unless the first weight matrices [8, 6] of make_trainer's models a
 * and b are equal bit for bit. */
static void assert_first_weights_equal(kiln_model *a, kiln_model *b) {
  kiln_tensor *wa = NULL, *wb = NULL;
  double va[6 * 8], vb[6 * 8];
  assert_kiln_ok(kiln_model_parameter(a, 0, &wa));
  assert_kiln_ok(kiln_model_parameter(b, 0, &wb));
  kiln_test_read_f64(wa, va, 48);
  kiln_test_read_f64(wb, vb, 48);
  assert_memory_equal(va, vb, sizeof va);
  kiln_tensor_release(wa);
  kiln_tensor_release(wb);
}

/* A job of one rank trains bit for bit like no communicator at all. */
static void test_one_rank_job_trains_like_one_process(void **state) {
  if (no_plugin() || no_mpi() || !cpu_cases()) skip();
  kiln_context *ctx = *state;
  kiln_communicator *comm = NULL;
  int64_t rank = -1, size = -1, local = -1;
  assert_kiln_ok(kiln_communicator_create_mpi(ctx, &comm));
  assert_kiln_ok(kiln_communicator_rank(comm, &rank));
  assert_kiln_ok(kiln_communicator_size(comm, &size));
  assert_kiln_ok(kiln_communicator_local_rank(comm, &local));
  assert_int_equal(rank, 0);
  assert_int_equal(size, 1);
  assert_int_equal(local, 0);
  assert_status(kiln_communicator_set_timeout(comm, -1), KILN_ERROR_INVALID_ARGUMENT);

  kiln_tensor *x = NULL, *y = NULL;
  random_samples(ctx, 11, 100, kCpu, &x, &y);
  kiln_dataset *ds = NULL;
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, x, y, &ds));

  kiln_model *plain_model = NULL, *model = NULL;
  kiln_trainer *plain = make_trainer(ctx, &plain_model), *ddp = make_trainer(ctx, &model);
  assert_kiln_ok(kiln_trainer_attach_communicator(ddp, comm));
  kiln_communicator_release(comm); /* the trainer keeps it */
  kiln_epoch_stats a = {sizeof a}, b = {sizeof b};
  for (int e = 0; e < 2; ++e) {
    assert_kiln_ok(kiln_trainer_epoch(plain, ds, &a));
    assert_kiln_ok(kiln_trainer_epoch(ddp, ds, &b));
  }
  assert_true(a.train_loss == b.train_loss);
  assert_first_weights_equal(plain_model, model);
  kiln_trainer_release(plain);
  kiln_trainer_release(ddp);
  kiln_model_release(plain_model);
  kiln_model_release(model);
  kiln_dataset_release(ds);
  kiln_tensor_release(x);
  kiln_tensor_release(y);
}

static void test_local_argument_checks(void **state) {
  if (!cpu_cases()) skip();
  kiln_context *ctx = *state;
  kiln_communicator *out[2] = {(kiln_communicator *)ctx, (kiln_communicator *)ctx};
  kiln_device cpu[1] = {{KILN_DEVICE_CPU, -1}}, missing[1] = {{KILN_DEVICE_CUDA, 99}};
  assert_status(kiln_communicator_create_local(ctx, cpu, 0, out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_communicator_create_local(ctx, NULL, 1, out), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_communicator_create_local(ctx, cpu, 1, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_communicator_create_local(ctx, cpu, 1, out), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("cpu is not one");
  assert_status(kiln_communicator_create_local(ctx, missing, 1, out), KILN_ERROR_DEVICE_UNAVAILABLE);
  assert_null(out[0]); /* the failed call's outputs are NULL */
  /* The list is checked before any device is looked for: the same status
   * with CUDA or without (it was DEVICE_UNAVAILABLE without). */
  const kiln_device twice[2] = {{KILN_DEVICE_CUDA, 99}, {KILN_DEVICE_CUDA, 99}};
  const kiln_device gpu_and_cpu[2] = {{KILN_DEVICE_CUDA, 99}, {KILN_DEVICE_CPU, -1}};
  assert_status(kiln_communicator_create_local(ctx, twice, 2, out), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("cuda:99 is listed twice");
  assert_status(kiln_communicator_create_local(ctx, gpu_and_cpu, 2, out), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("cpu is not one");
  assert_null(out[0]);
  assert_null(out[1]);
  /* A count that cannot be right says nothing about out[]: it is left as it
   * is (it used to be cleared first, 2^40 pointers of it). */
  const int64_t bad_counts[] = {(int64_t)1 << 40, KILN_MAX_DATA_PARALLEL_DEVICES + 1, -1};
  for (size_t i = 0; i < sizeof bad_counts / sizeof bad_counts[0]; ++i) {
    out[0] = out[1] = (kiln_communicator *)ctx;
    assert_status(kiln_communicator_create_local(ctx, missing, bad_counts[i], out), KILN_ERROR_INVALID_ARGUMENT);
    assert_last_error_contains("count must be in [1, 64]");
    assert_ptr_equal(out[0], ctx);
    assert_ptr_equal(out[1], ctx);
  }
}

typedef struct attach_from_callback {
  kiln_trainer *trainer;
  kiln_communicator *comm;
  kiln_status status;
  int calls;
} attach_from_callback;

static int attach_inside(void *user, const kiln_progress *p) {
  (void)p;
  attach_from_callback *a = user;
  if (a->calls++ == 0) a->status = kiln_trainer_attach_communicator(a->trainer, a->comm);
  return 0;
}

/* Attaching from the trainer's own progress callback would swap the
 * communicator and broadcast weights under the running pass: BUSY, and the
 * fit goes on as if nothing was asked. */
static void test_attach_from_progress_callback_is_busy(void **state) {
  if (no_plugin() || no_mpi() || !cpu_cases()) skip();
  kiln_context *ctx = *state;
  kiln_communicator *comm = NULL;
  assert_kiln_ok(kiln_communicator_create_mpi(ctx, &comm));
  kiln_tensor *x = NULL, *y = NULL;
  random_samples(ctx, 12, 64, kCpu, &x, &y);
  kiln_dataset *ds = NULL;
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, x, y, &ds));
  kiln_model *model = NULL, *plain_model = NULL;
  kiln_trainer *t = make_trainer(ctx, &model), *plain = make_trainer(ctx, &plain_model);
  attach_from_callback a = {t, comm, KILN_OK, 0};
  kiln_history *h = NULL;
  assert_kiln_ok(kiln_trainer_fit(t, ds, NULL, 1, attach_inside, &a, &h));
  assert_true(a.calls > 0);
  assert_int_equal(a.status, KILN_ERROR_BUSY);
  kiln_history_release(h);
  assert_kiln_ok(kiln_trainer_fit(plain, ds, NULL, 1, NULL, NULL, &h));
  kiln_history_release(h);
  assert_first_weights_equal(plain_model, model); /* the fit ran as without the callback */
  /* Outside the callback, it attaches. */
  assert_kiln_ok(kiln_trainer_attach_communicator(t, comm));
  kiln_trainer_release(t);
  kiln_trainer_release(plain);
  kiln_model_release(model);
  kiln_model_release(plain_model);
  kiln_communicator_release(comm);
  kiln_dataset_release(ds);
  kiln_tensor_release(x);
  kiln_tensor_release(y);
}

/* The GPU twin of DataParallel: a local NCCL communicator over [cuda:0], one
 * rank, trains like no communicator. */
static void test_local_communicator_on_one_gpu(void **state) {
  kiln_context *ctx = *state;
  kiln_device gpu;
  if (no_plugin() || !kiln_test_gpu_cases(ctx, &gpu)) skip();
  kiln_communicator *comm = NULL;
  assert_kiln_ok(kiln_communicator_create_local(ctx, &gpu, 1, &comm));
  int64_t rank = -1, size = -1;
  assert_kiln_ok(kiln_communicator_rank(comm, &rank));
  assert_kiln_ok(kiln_communicator_size(comm, &size));
  assert_int_equal(rank, 0);
  assert_int_equal(size, 1);
  kiln_tensor *x = NULL, *y = NULL;
  random_samples(ctx, 13, 128, gpu, &x, &y);
  kiln_dataset *ds = NULL;
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, x, y, &ds));
  kiln_model *plain_model = NULL, *model = NULL;
  kiln_trainer *plain = make_trainer(ctx, &plain_model), *ddp = make_trainer(ctx, &model);
  kiln_trainer_release(plain);
  kiln_trainer_release(ddp);
  assert_kiln_ok(kiln_model_to(plain_model, gpu));
  assert_kiln_ok(kiln_model_to(model, gpu));
  plain = trainer_of(plain_model);
  ddp = trainer_of(model);
  assert_kiln_ok(kiln_trainer_attach_communicator(ddp, comm));
  kiln_epoch_stats a = {sizeof a}, b = {sizeof b};
  assert_kiln_ok(kiln_trainer_epoch(plain, ds, &a));
  assert_kiln_ok(kiln_trainer_epoch(ddp, ds, &b));
  kiln_tensor *wa = NULL, *wb = NULL;
  double va[48];
  assert_kiln_ok(kiln_model_parameter(plain_model, 0, &wa));
  assert_kiln_ok(kiln_model_parameter(model, 0, &wb));
  kiln_test_read_f64(wa, va, 48);
  assert_tensor_close(wb, va, 48, 1e-6, 1e-7);
  kiln_tensor_release(wa);
  kiln_tensor_release(wb);
  kiln_trainer_release(plain);
  kiln_trainer_release(ddp);
  kiln_model_release(plain_model);
  kiln_model_release(model);
  kiln_dataset_release(ds);
  kiln_tensor_release(x);
  kiln_tensor_release(y);
  kiln_communicator_release(comm);
}

/* DataParallel's device list: the checks of the setter and of
 * kiln_trainer_create, and one device listed as plain training. */
static void test_data_parallel_device_list(void **state) {
  if (!cpu_cases()) skip();
  kiln_context *ctx = *state;
  kiln_trainer_options *o = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  const kiln_device cpu_and_gpu[2] = {{KILN_DEVICE_CPU, -1}, {KILN_DEVICE_CUDA, 0}};
  const kiln_device twice[2] = {{KILN_DEVICE_CUDA, 1}, {KILN_DEVICE_CUDA, 1}};
  const kiln_device bad_kind[1] = {{(kiln_device_kind)99, 0}};
  const kiln_device gpus[2] = {{KILN_DEVICE_CUDA, 0}, {KILN_DEVICE_CUDA, 1}};
  assert_status(kiln_trainer_options_set_devices(NULL, gpus, 2), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_devices(o, NULL, 2), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_devices(o, gpus, -1), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_devices(o, gpus, KILN_MAX_DATA_PARALLEL_DEVICES + 1),
                KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_devices(o, cpu_and_gpu, 2), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("cpu can only be listed alone");
  assert_status(kiln_trainer_options_set_devices(o, twice, 2), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("cuda:1 is listed twice");
  assert_status(kiln_trainer_options_set_devices(o, bad_kind, 1), KILN_ERROR_INVALID_ARGUMENT);
  assert_kiln_ok(kiln_trainer_options_set_devices(o, NULL, 0)); /* clears */
  /* Gradient buckets: bytes >= 0 (their effect: dist_test, data_parallel_test). */
  assert_status(kiln_trainer_options_set_bucket_bytes(NULL, 1024), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_bucket_bytes(o, -1), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("bucket_bytes must be >= 0, got -1");
  assert_kiln_ok(kiln_trainer_options_set_bucket_bytes(o, INT64_MAX));
  assert_kiln_ok(kiln_trainer_options_set_bucket_bytes(o, 0));

  kiln_model *model = NULL;
  kiln_trainer *plain = make_trainer(ctx, &model), *t = (kiln_trainer *)ctx;
  /* The model must be on the first listed device. */
  assert_kiln_ok(kiln_trainer_options_set_devices(o, gpus, 2));
  assert_status(kiln_trainer_create(model, o, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("first listed device, cuda:0");
  assert_null(t);
  assert_kiln_ok(kiln_trainer_options_set_devices(o, gpus, 1));
  assert_status(kiln_trainer_create(model, o, &t), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("model is on cpu");

  /* [cpu] is plain training on the CPU: the same steps as no list. */
  kiln_model *model2 = NULL;
  kiln_trainer *listed = make_trainer(ctx, &model2);
  kiln_trainer_release(listed);
  assert_kiln_ok(kiln_trainer_options_set_batch_size(o, 16));
  assert_kiln_ok(kiln_trainer_options_set_momentum(o, 0.9));
  assert_kiln_ok(kiln_trainer_options_set_devices(o, &kCpu, 1));
  assert_kiln_ok(kiln_trainer_create(model2, o, &listed));
  assert_status(kiln_trainer_attach_communicator(listed, NULL), KILN_ERROR_INVALID_ARGUMENT);
  kiln_trainer_release(plain);
  assert_kiln_ok(kiln_trainer_create(model, o, &plain));
  assert_kiln_ok(kiln_trainer_options_set_devices(o, NULL, 0));
  kiln_tensor *x = NULL, *y = NULL;
  random_samples(ctx, 17, 16, kCpu, &x, &y);
  /* make_trainer seeds the context: both models start from the same weights */
  double la = 0, lb = 0;
  for (int s = 0; s < 3; ++s) {
    assert_kiln_ok(kiln_trainer_step(plain, x, y, &la));
    assert_kiln_ok(kiln_trainer_step(listed, x, y, &lb));
    assert_true(la == lb);
  }
  kiln_tensor_release(x);
  kiln_tensor_release(y);
  kiln_trainer_release(plain);
  kiln_trainer_release(listed);
  kiln_model_release(model);
  kiln_model_release(model2);
  kiln_trainer_options_release(o);
  assert_status(kiln_trainer_options_set_devices(o, gpus, 2), KILN_ERROR_INVALID_HANDLE);
  assert_status(kiln_trainer_options_set_bucket_bytes(o, 1024), KILN_ERROR_INVALID_HANDLE);
}

/* The GPU twin: DataParallel over [cuda:0] is plain training there, and over
 * [cuda:0, cuda:1] (with two GPUs) batch 32 (per device) trains like batch 64
 * on one GPU. */
static void test_data_parallel_on_gpus(void **state) {
  kiln_context *ctx = *state;
  kiln_device gpu;
  if (no_plugin() || !kiln_test_gpu_cases(ctx, &gpu)) skip();
  int64_t gpus = 0;
  assert_kiln_ok(kiln_device_count(ctx, KILN_DEVICE_CUDA, &gpus));
  kiln_tensor *x = NULL, *y = NULL;
  random_samples(ctx, 19, 256, kCpu, &x, &y);
  kiln_dataset *ds = NULL;
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, x, y, &ds));
  const kiln_device list[2] = {gpu, {KILN_DEVICE_CUDA, gpu.index == 0 ? 1 : 0}};
  for (int64_t n = 1; n <= (gpus >= 2 ? 2 : 1); ++n) {
    kiln_model *plain_model = NULL, *model = NULL;
    kiln_trainer *plain = make_trainer(ctx, &plain_model), *dp = make_trainer(ctx, &model);
    kiln_trainer_release(plain);
    kiln_trainer_release(dp);
    assert_kiln_ok(kiln_model_to(plain_model, gpu));
    assert_kiln_ok(kiln_model_to(model, gpu));
    kiln_trainer_options *o = NULL;
    assert_kiln_ok(kiln_trainer_options_create(&o));
    assert_kiln_ok(kiln_trainer_options_set_batch_size(o, 32 * n));
    assert_kiln_ok(kiln_trainer_options_set_shuffle_seed(o, 3));
    assert_kiln_ok(kiln_trainer_create(plain_model, o, &plain));
    assert_kiln_ok(kiln_trainer_options_set_batch_size(o, 32));
    assert_kiln_ok(kiln_trainer_options_set_devices(o, list, n));
    /* With two GPUs, a bucket per layer: NCCL after each layer's backward. */
    assert_kiln_ok(kiln_trainer_options_set_bucket_bytes(o, 1));
    assert_kiln_ok(kiln_trainer_create(model, o, &dp));
    kiln_trainer_options_release(o);
    kiln_epoch_stats a = {sizeof a}, b = {sizeof b};
    assert_kiln_ok(kiln_trainer_epoch(plain, ds, &a));
    assert_kiln_ok(kiln_trainer_epoch(dp, ds, &b));
    assert_true(fabs(a.train_loss - b.train_loss) <= 1e-5 * a.train_loss);
    kiln_tensor *wa = NULL, *wb = NULL;
    double va[48];
    assert_kiln_ok(kiln_model_parameter(plain_model, 0, &wa));
    assert_kiln_ok(kiln_model_parameter(model, 0, &wb));
    kiln_test_read_f64(wa, va, 48);
    assert_tensor_close(wb, va, 48, 1e-5, 1e-6);
    kiln_tensor_release(wa);
    kiln_tensor_release(wb);
    kiln_trainer_release(plain);
    kiln_trainer_release(dp);
    kiln_model_release(plain_model);
    kiln_model_release(model);
  }
  kiln_dataset_release(ds);
  kiln_tensor_release(x);
  kiln_tensor_release(y);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_null_arguments),
      cmocka_unit_test(test_missing_plugin_is_device_unavailable),
      cmocka_unit_test(test_plugin_without_mpi_is_device_unavailable),
      cmocka_unit_test(test_plugin_of_another_build),
      cmocka_unit_test(test_one_rank_job_trains_like_one_process),
      cmocka_unit_test(test_local_argument_checks),
      cmocka_unit_test(test_attach_from_progress_callback_is_busy),
      cmocka_unit_test(test_local_communicator_on_one_gpu),
      cmocka_unit_test(test_data_parallel_device_list),
      cmocka_unit_test(test_data_parallel_on_gpus),
  };
  return cmocka_run_group_tests(tests, kiln_test_context_setup, kiln_test_context_teardown);
}
