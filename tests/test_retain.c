/* kiln_*_retain: a second handle to the same object, released on its own,
 * and what a release does while other threads are inside calls with the
 * handle (they finish; later calls get INVALID_HANDLE). The threaded cases
 * check every result against a forward pass computed here on the host from
 * the model's parameters; run them under TSan too (README, "Sanitizers"). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

static const kiln_device kCpu = {KILN_DEVICE_CPU, -1};

enum { kIn = 6, kHidden = 16, kOut = 3, kBatch = 5, kThreads = 4 };

static kiln_model *make_model(kiln_context *ctx) {
  return kiln_test_model_on(ctx, "6-16-3", kCpu, KILN_F32);
}

/* The model's forward pass on the host: Linear, ReLU, Linear, in double from
 * the f32 parameters. */
static void host_forward(kiln_model *model, const float *x, double *out) {
  double w1[kHidden * kIn], b1[kHidden], w2[kOut * kHidden], b2[kOut];
  double *params[] = {w1, b1, w2, b2};
  const int64_t sizes[] = {kHidden * kIn, kHidden, kOut * kHidden, kOut};
  for (int64_t i = 0; i < 4; ++i) {
    kiln_tensor *p = NULL;
    assert_kiln_ok(kiln_model_parameter(model, i, &p));
    kiln_test_read_f64(p, params[i], sizes[i]);
    kiln_tensor_release(p);
  }
  for (int r = 0; r < kBatch; ++r) {
    double h[kHidden];
    for (int j = 0; j < kHidden; ++j) {
      double s = b1[j];
      for (int k = 0; k < kIn; ++k) s += w1[j * kIn + k] * x[r * kIn + k];
      h[j] = s > 0 ? s : 0;
    }
    for (int j = 0; j < kOut; ++j) {
      double s = b2[j];
      for (int k = 0; k < kHidden; ++k) s += w2[j * kHidden + k] * h[k];
      out[r * kOut + j] = s;
    }
  }
}

/* A model, an input batch x drawn from seed, and the host's forward pass of
 * x (want, kBatch * kOut values). */
static void make_case(kiln_context *ctx, uint64_t seed, kiln_model **model, kiln_tensor **x, double *want) {
  *model = make_model(ctx);
  float xv[kBatch * kIn];
  kiln_test_rng rng = kiln_test_rng_make(seed);
  kiln_test_fill_uniform_f32(&rng, xv, kBatch * kIn, -2, 2);
  const int64_t shape[] = {kBatch, kIn};
  *x = kiln_test_tensor_f32(ctx, xv, shape, 2, kCpu);
  host_forward(*model, xv, want);
}

/* The error paths every retain shares: NULL handle or out, a released or
 * wrong-type handle; *out is NULL after each. */
#define CHECK_RETAIN_ERRORS(retain, type, live, released, foreign)                           \
  do {                                                                                       \
    type *out_ = (type *)&out_;                                                              \
    assert_status(retain(NULL, &out_), KILN_ERROR_INVALID_ARGUMENT);                         \
    assert_null(out_);                                                                       \
    assert_status(retain(live, NULL), KILN_ERROR_INVALID_ARGUMENT);                          \
    out_ = (type *)&out_;                                                                    \
    assert_status(retain(released, &out_), KILN_ERROR_INVALID_HANDLE);                       \
    assert_null(out_);                                                                       \
    out_ = (type *)&out_;                                                                    \
    assert_status(retain((type *)(void *)(foreign), &out_), KILN_ERROR_INVALID_HANDLE);      \
    assert_null(out_);                                                                       \
  } while (0)

static void test_retain_every_handle_type(void **state) {
  (void)state;
  kiln_context *ctx = kiln_test_context_create(3), *ctx2 = NULL;
  /* Context: the second handle outlives the first and still makes tensors. */
  assert_kiln_ok(kiln_context_retain(ctx, &ctx2));
  assert_ptr_not_equal(ctx, ctx2);
  kiln_context_release(ctx);
  const int64_t shape[] = {2, 3};
  kiln_tensor *t = NULL, *t2 = NULL;
  assert_kiln_ok(kiln_tensor_zeros(ctx2, shape, 2, KILN_F32, kCpu, &t));
  assert_status(kiln_tensor_zeros(ctx, shape, 2, KILN_F32, kCpu, &t2), KILN_ERROR_INVALID_HANDLE);
  CHECK_RETAIN_ERRORS(kiln_context_retain, kiln_context, ctx2, ctx, t);

  /* Tensor: both handles see one storage. */
  assert_kiln_ok(kiln_tensor_retain(t, &t2));
  const float values[] = {1, 2, 3, 4, 5, 6};
  assert_kiln_ok(kiln_tensor_copy_from_host(t2, values, sizeof values));
  const double want[] = {1, 2, 3, 4, 5, 6};
  assert_tensor_close(t, want, 6, 0, 0);
  kiln_tensor_release(t);
  assert_tensor_close(t2, want, 6, 0, 0);
  CHECK_RETAIN_ERRORS(kiln_tensor_retain, kiln_tensor, t2, t, ctx2);

  /* Model: the retained handle answers for the same parameters. */
  kiln_model *model = make_model(ctx2), *model2 = NULL;
  assert_kiln_ok(kiln_model_retain(model, &model2));
  assert_kiln_ok(kiln_model_set_training(model, 0));
  int training = 1;
  assert_kiln_ok(kiln_model_is_training(model2, &training));
  assert_int_equal(training, 0);
  kiln_model_release(model);
  int64_t n = 0;
  assert_kiln_ok(kiln_model_num_parameters(model2, &n));
  assert_int_equal(n, kIn * kHidden + kHidden + kHidden * kOut + kOut);
  CHECK_RETAIN_ERRORS(kiln_model_retain, kiln_model, model2, model, t2);

  /* Dataset, trainer and history. */
  const int64_t xs[] = {4, kIn}, ys[] = {4};
  kiln_tensor *x = NULL, *y = NULL;
  assert_kiln_ok(kiln_tensor_rand(ctx2, xs, 2, KILN_F32, kCpu, &x));
  assert_kiln_ok(kiln_tensor_zeros(ctx2, ys, 1, KILN_I64, kCpu, &y));
  kiln_dataset *ds = NULL, *ds2 = NULL;
  assert_kiln_ok(kiln_dataset_from_tensors(ctx2, x, y, &ds));
  assert_kiln_ok(kiln_dataset_retain(ds, &ds2));
  kiln_dataset_release(ds);
  assert_kiln_ok(kiln_dataset_size(ds2, &n));
  assert_int_equal(n, 4);
  CHECK_RETAIN_ERRORS(kiln_dataset_retain, kiln_dataset, ds2, ds, model2);

  kiln_trainer *trainer = NULL, *trainer2 = NULL;
  assert_kiln_ok(kiln_trainer_create(model2, NULL, &trainer));
  assert_kiln_ok(kiln_trainer_retain(trainer, &trainer2));
  kiln_history *history = NULL, *history2 = NULL;
  assert_kiln_ok(kiln_trainer_fit(trainer, ds2, NULL, 2, NULL, NULL, &history));
  kiln_trainer_release(trainer);
  assert_kiln_ok(kiln_trainer_epochs_done(trainer2, &n));
  assert_int_equal(n, 2); /* one trainer: the fit through the first handle counts */
  CHECK_RETAIN_ERRORS(kiln_trainer_retain, kiln_trainer, trainer2, trainer, ds2);

  assert_kiln_ok(kiln_history_retain(history, &history2));
  kiln_epoch_stats first = {sizeof first}, again = {sizeof again};
  assert_kiln_ok(kiln_history_get(history, 0, &first));
  kiln_history_release(history);
  assert_kiln_ok(kiln_history_get(history2, 0, &again));
  assert_true(first.train_loss == again.train_loss && again.epoch == 1);
  CHECK_RETAIN_ERRORS(kiln_history_retain, kiln_history, history2, history, trainer2);

  /* A communicator needs the MPI plugin; its retain's argument checks do not. */
  kiln_communicator *comm = (kiln_communicator *)&comm;
  assert_status(kiln_communicator_retain(NULL, &comm), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(comm);
  assert_status(kiln_communicator_retain((kiln_communicator *)(void *)history2, &comm), KILN_ERROR_INVALID_HANDLE);

  /* Each handle is released once; a second release and NULL do nothing. */
  kiln_history_release(history2);
  kiln_history_release(history2);
  assert_status(kiln_history_size(history2, &n), KILN_ERROR_INVALID_HANDLE);
  kiln_trainer_release(trainer2);
  kiln_dataset_release(ds2);
  kiln_model_release(model2);
  kiln_tensor_release(t2);
  kiln_tensor_release(x);
  kiln_tensor_release(y);
  kiln_context_release(ctx2);
  kiln_context_release(NULL);
  assert_status(kiln_context_set_seed(ctx2, 1), KILN_ERROR_INVALID_HANDLE);
}

/* ---- threads ------------------------------------------------------------ */

typedef struct {
  kiln_model *shared;   /* the main thread's handle */
  kiln_tensor *x;
  const double *want;   /* host forward pass of x */
  pthread_barrier_t *retained;
  atomic_int *mismatches, *failures;
  int iterations;
} worker_args;

static int forward_matches(kiln_model *model, kiln_tensor *x, const double *want, kiln_status *status) {
  kiln_tensor *out = NULL;
  *status = kiln_model_forward(model, x, &out);
  if (*status != KILN_OK) return out == NULL;
  float got[kBatch * kOut]; /* no cmocka assertion on a worker thread: they longjmp */
  *status = kiln_tensor_copy_to_host(out, got, sizeof got);
  kiln_tensor_release(out);
  if (*status != KILN_OK) return 0;
  for (int i = 0; i < kBatch * kOut; ++i) {
    const double tol = 1e-5 * (1 + (want[i] < 0 ? -want[i] : want[i]));
    if (got[i] - want[i] > tol || want[i] - got[i] > tol) return 0;
  }
  return 1;
}

/* Takes its own reference, waits until every worker has one and the main
 * thread has dropped its own, then uses and releases it. */
static void *own_reference_worker(void *p) {
  worker_args *a = p;
  kiln_model *mine = NULL;
  if (kiln_model_retain(a->shared, &mine) != KILN_OK) atomic_fetch_add(a->failures, 1);
  pthread_barrier_wait(a->retained);
  pthread_barrier_wait(a->retained); /* the main thread released a->shared */
  kiln_status status;
  for (int i = 0; i < a->iterations; ++i) {
    if (!forward_matches(mine, a->x, a->want, &status)) atomic_fetch_add(a->mismatches, 1);
    if (status != KILN_OK) atomic_fetch_add(a->failures, 1);
  }
  /* The main thread's handle is dead for everyone, whatever the others hold. */
  kiln_tensor *out = NULL;
  if (kiln_model_forward(a->shared, a->x, &out) != KILN_ERROR_INVALID_HANDLE) atomic_fetch_add(a->failures, 1);
  kiln_model_release(mine);
  return NULL;
}

static void test_threads_hold_their_own_reference(void **state) {
  kiln_model *model = NULL;
  kiln_tensor *x = NULL;
  double want[kBatch * kOut];
  make_case(*state, 11, &model, &x, want);

  pthread_barrier_t retained;
  pthread_barrier_init(&retained, NULL, kThreads + 1);
  atomic_int mismatches = 0, failures = 0;
  worker_args args = {model, x, want, &retained, &mismatches, &failures, 200};
  pthread_t threads[kThreads];
  for (int i = 0; i < kThreads; ++i) assert_int_equal(pthread_create(&threads[i], NULL, own_reference_worker, &args), 0);
  pthread_barrier_wait(&retained);
  kiln_model_release(model); /* every worker holds its own reference now */
  pthread_barrier_wait(&retained);
  for (int i = 0; i < kThreads; ++i) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&retained);
  assert_int_equal(atomic_load(&failures), 0);
  assert_int_equal(atomic_load(&mismatches), 0);
  kiln_tensor_release(x);
}

typedef struct {
  kiln_model *shared;
  kiln_tensor *x;
  const double *want;
  atomic_int *started, *mismatches, *failures, *ok_calls;
} racer_args;

/* Calls forward on the one shared handle until it is released: every call
 * that returns OK has the right result, and once a call says
 * INVALID_HANDLE, every later one does too. */
static void *racer(void *p) {
  racer_args *a = p;
  atomic_fetch_add(a->started, 1);
  kiln_status status = KILN_OK;
  while (status == KILN_OK) {
    if (!forward_matches(a->shared, a->x, a->want, &status)) atomic_fetch_add(a->mismatches, 1);
    if (status == KILN_OK) atomic_fetch_add(a->ok_calls, 1);
  }
  if (status != KILN_ERROR_INVALID_HANDLE) atomic_fetch_add(a->failures, 1);
  for (int i = 0; i < 20; ++i) {
    kiln_tensor *out = NULL;
    if (kiln_model_forward(a->shared, a->x, &out) != KILN_ERROR_INVALID_HANDLE || out)
      atomic_fetch_add(a->failures, 1);
  }
  return NULL;
}

static void test_release_while_other_threads_call(void **state) {
  kiln_model *model = NULL;
  kiln_tensor *x = NULL;
  double want[kBatch * kOut];
  make_case(*state, 12, &model, &x, want);

  atomic_int started = 0, mismatches = 0, failures = 0, ok_calls = 0;
  racer_args args = {model, x, want, &started, &mismatches, &failures, &ok_calls};
  pthread_t threads[kThreads];
  for (int i = 0; i < kThreads; ++i) assert_int_equal(pthread_create(&threads[i], NULL, racer, &args), 0);
  while (atomic_load(&ok_calls) < 50 * kThreads) sched_yield(); /* every racer is inside calls by now */
  kiln_model_release(model);
  for (int i = 0; i < kThreads; ++i) pthread_join(threads[i], NULL);
  assert_int_equal(atomic_load(&started), kThreads);
  assert_int_equal(atomic_load(&failures), 0);
  assert_int_equal(atomic_load(&mismatches), 0);
  kiln_tensor_release(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_retain_every_handle_type),
      cmocka_unit_test_setup_teardown(test_threads_hold_their_own_reference, kiln_test_context_setup,
                                      kiln_test_context_teardown),
      cmocka_unit_test_setup_teardown(test_release_while_other_threads_call, kiln_test_context_setup,
                                      kiln_test_context_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
