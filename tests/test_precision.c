/* Trainer precisions (kiln_trainer_options_set_precision) through the public
 * API: one optimisation step for every layer kind (Linear followed by ReLU,
 * LeakyReLU, GELU, Tanh, Sigmoid, or Tanh + Dropout) x loss (cross-entropy,
 * MSE, BCE with logits) x optimizer (SGD, SGD with Nesterov momentum, Adam,
 * AdamW), from the same parameters and batch:
 *
 *  - test_precision (CPU): fp32 against the same step of an f64 model (a
 *    float64 reference computed by kiln's f64 path from the f32 parameters),
 *    bf16 against fp32; tf32 refused on the CPU, bad values refused.
 *  - test_precision_cuda (KILN_TEST_DEVICE=cuda, skipped without a device):
 *    CUDA fp32, tf32 and bf16 against CPU fp32.
 *
 * How far apart two steps may be. From the same parameters p, a step moves
 * p by u(g), g the gradient of the batch loss. Each run computes g with some
 * relative error: |g' - g| <= rel * |g| in norm. The first update is a
 * Lipschitz function of g: SGD lr * g, SGD with Nesterov momentum
 * lr * (1 + momentum) * g (the velocity starts at g), Adam and AdamW
 * lr * g / (|g| + eps) elementwise, whose slope is at most lr / eps (eps is
 * 0.1 here, so that this bound stays useful: with the default 1e-8, Adam's
 * first step is lr * sign(g) and a gradient element near 0 may flip under any
 * rounding). So ||p'_a - p'_b|| <= L * rel * ||g|| plus the rounding of the
 * new f32 parameters (<= 2^-24 |p| each; 2^-22 ||p|| with margin). ||g|| is
 * the reference gradient of the same layer and loss, measured by a plain SGD
 * step at lr 1 (g = p - p').
 *
 * rel per precision (the nets are 8-16-4, batch 16, at most three products
 * chained from an input to a weight gradient):
 *  - fp32: 1e-5. f32 rounds at 2^-24 ~ 6e-8 relative per operation; sums of
 *    16 terms and a few chained layers stay near 1e-6, 10x below.
 *  - tf32: 1e-2. Products on 10-bit mantissa inputs: 2^-11 per operand, about
 *    2^-10 per product; over three chained products and the f32 rounding of
 *    intermediate values, 10 * 2^-10 = 1e-2 bounds the worst case.
 *  - bf16: 4e-2. Products on 8-bit mantissa inputs: 2^-9 per operand, 2^-8
 *    per product, and activations stored in bf16 (another 2^-9): 10 * 2^-8 =
 *    3.9e-2. A broken mixed-precision path (a missing cast, lost master
 *    weights, a wrong loss scale) is off by O(1), far outside.
 * The loss of the step (before the update) must agree within the same rel
 * (plus 1e-6 absolute). */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};

enum { BATCH = 16, IN = 8, HIDDEN = 16, OUT = 4 };

static const char *const layer_specs[] = {
    "linear(8,16);relu;linear(16,4)",
    "linear(8,16);leaky_relu(0.1);linear(16,4)",
    "linear(8,16);gelu;linear(16,4)",
    "linear(8,16);tanh;linear(16,4)",
    "linear(8,16);sigmoid;linear(16,4)",
    "linear(8,16);tanh;dropout(0.25);linear(16,4)",
};
enum { NLAYERS = sizeof layer_specs / sizeof layer_specs[0] };

static const kiln_loss_kind losses[] = {KILN_LOSS_CROSS_ENTROPY, KILN_LOSS_MSE, KILN_LOSS_BCE_WITH_LOGITS};
static const char *const loss_names[] = {"cross-entropy", "mse", "bce"};

typedef struct {
  const char *name;
  kiln_optimizer_kind kind;
  double lr, momentum;
  int nesterov;
} optim_case;

static const optim_case optimizers[] = {
    {"sgd", KILN_OPTIM_SGD, 0.1, 0, 0},
    {"sgd nesterov", KILN_OPTIM_SGD, 0.1, 0.9, 1},
    {"adam", KILN_OPTIM_ADAM, 0.01, 0, 0},
    {"adamw", KILN_OPTIM_ADAMW, 0.01, 0, 0},
};
static const double kAdamEps = 0.1;

/* L: the update's Lipschitz constant in g (see the top of the file). */
static double lipschitz(const optim_case *o) {
  if (o->kind == KILN_OPTIM_SGD) return o->lr * (1 + (o->nesterov ? o->momentum : 0));
  return o->lr / kAdamEps;
}

static double precision_rel(kiln_precision p) {
  switch (p) {
    case KILN_PRECISION_FP32: return 1e-5;
    case KILN_PRECISION_TF32: return 1e-2;
    case KILN_PRECISION_BF16: return 4e-2;
  }
  return 0;
}

static const char *precision_name(kiln_precision p) {
  return p == KILN_PRECISION_FP32 ? "fp32" : p == KILN_PRECISION_TF32 ? "tf32" : "bf16";
}

/* The batch, the parameters every run starts from, and the reference. */
typedef struct {
  kiln_context *ctx;
  kiln_tensor *x, *y[3]; /* y per loss kind */
  int64_t n;             /* parameters */
  double *params;        /* f32 values */
} fixture;

static kiln_model *make_model(kiln_context *ctx, const char *text, kiln_device dev, kiln_dtype dtype) {
  return kiln_test_model_on(ctx, text, dev, dtype);
}

/* Reads (or writes) all parameters of an f32 or f64 model, on any device, as
 * one array of doubles. */
static void params_io(kiln_model *model, double *all, int write) {
  int64_t tensors = 0, at = 0;
  assert_kiln_ok(kiln_model_num_parameter_tensors(model, &tensors));
  for (int64_t i = 0; i < tensors; ++i) {
    kiln_tensor *p = NULL;
    int64_t n = 0;
    kiln_dtype dtype;
    assert_kiln_ok(kiln_model_parameter(model, i, &p));
    assert_kiln_ok(kiln_tensor_numel(p, &n));
    assert_kiln_ok(kiln_tensor_dtype(p, &dtype));
    if (!write) {
      kiln_test_read_f64(p, all + at, n);
    } else if (dtype == KILN_F64) {
      assert_kiln_ok(kiln_tensor_copy_from_host(p, all + at, n * (int64_t)sizeof(double)));
    } else {
      assert_int_equal(dtype, KILN_F32);
      float *f = malloc((size_t)n * sizeof *f);
      for (int64_t j = 0; j < n; ++j) f[j] = (float)all[at + j];
      assert_kiln_ok(kiln_tensor_copy_from_host(p, f, n * (int64_t)sizeof(float)));
      free(f);
    }
    at += n;
    kiln_tensor_release(p);
  }
}

static double norm2(const double *v, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += v[i] * v[i];
  return sqrt(s);
}

static kiln_status make_options(const optim_case *o, kiln_loss_kind loss, kiln_precision precision,
                                kiln_trainer_options **out) {
  kiln_trainer_options *opts = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&opts));
  assert_kiln_ok(kiln_trainer_options_set_loss(opts, loss));
  assert_kiln_ok(kiln_trainer_options_set_optimizer(opts, o->kind));
  assert_kiln_ok(kiln_trainer_options_set_lr(opts, o->lr));
  assert_kiln_ok(kiln_trainer_options_set_momentum(opts, o->momentum));
  assert_kiln_ok(kiln_trainer_options_set_nesterov(opts, o->nesterov));
  assert_kiln_ok(kiln_trainer_options_set_eps(opts, kAdamEps));
  assert_kiln_ok(kiln_trainer_options_set_batch_size(opts, BATCH));
  assert_kiln_ok(kiln_trainer_options_set_shuffle_seed(opts, 5)); /* the dropout masks' seed too */
  kiln_status status = kiln_trainer_options_set_precision(opts, precision);
  *out = opts;
  return status;
}

/* One step of `o` at `precision` on a fresh model of `dtype` on `dev` holding
 * f->params; writes the parameters after it and returns the step's loss. */
static double run_step(fixture *f, int layer, int loss, const optim_case *o, kiln_precision precision,
                       kiln_device dev, kiln_dtype dtype, double *after) {
  kiln_model *model = make_model(f->ctx, layer_specs[layer], dev, dtype);
  params_io(model, f->params, 1);
  kiln_trainer_options *opts = NULL;
  assert_kiln_ok(make_options(o, losses[loss], precision, &opts));
  kiln_trainer *trainer = NULL;
  assert_kiln_ok(kiln_trainer_create(model, opts, &trainer));
  double step_loss = -1;
  assert_kiln_ok(kiln_trainer_step(trainer, f->x, f->y[loss], &step_loss));
  params_io(model, after, 0);
  kiln_trainer_release(trainer);
  kiln_trainer_options_release(opts);
  kiln_model_release(model);
  return step_loss;
}

/* The largest share of its bound a comparison used, per precision (printed). */
static double worst_ratio[3];
/* The largest distance of a tf32/bf16 step as a share of fp32's bound: above
 * 1 somewhere, or the low precision was not used at all. */
static double beyond_fp32[3];

/* ||after - want|| <= L * rel * ||g|| + 2^-22 ||p||, and the losses within rel. */
static void check_step(kiln_precision precision, const char *what, const double *after, double loss, const double *want, double want_loss,
                       int64_t n, double lipschitz_const, double rel, double grad_norm, double param_norm) {
  double *diff = malloc((size_t)n * sizeof *diff);
  for (int64_t i = 0; i < n; ++i) diff[i] = after[i] - want[i];
  const double err = norm2(diff, n), bound = lipschitz_const * rel * grad_norm + ldexp(param_norm, -22);
  free(diff);
  const double loss_err = fabs(loss - want_loss), loss_bound = rel * fabs(want_loss) + 1e-6;
  const double ratio = fmax(err / bound, loss_err / loss_bound);
  const double fp32_bound = lipschitz_const * precision_rel(KILN_PRECISION_FP32) * grad_norm + ldexp(param_norm, -22);
  if (err / fp32_bound > beyond_fp32[precision]) beyond_fp32[precision] = err / fp32_bound;
  if (ratio > worst_ratio[precision]) worst_ratio[precision] = ratio;
  if (err > bound || loss_err > loss_bound || !isfinite(loss)) {
    print_error("%s: ||params - reference|| = %.3g (bound %.3g), |loss - reference| = %.3g (bound %.3g)\n", what, err,
                bound, loss_err, loss_bound);
    fail();
  }
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  f->ctx = kiln_test_context_create(0);
  kiln_test_rng rng = kiln_test_rng_make(2024);
  float x[BATCH * IN], mse[BATCH * OUT], bce[BATCH * OUT];
  int64_t labels[BATCH];
  kiln_test_fill_uniform_f32(&rng, x, BATCH * IN, -2, 2);
  for (int i = 0; i < BATCH * OUT; ++i) mse[i] = (float)kiln_test_rng_normal(&rng);
  kiln_test_fill_uniform_f32(&rng, bce, BATCH * OUT, 0, 1);
  for (int i = 0; i < BATCH; ++i) labels[i] = kiln_test_rng_below(&rng, OUT);
  const int64_t xs[] = {BATCH, IN}, ys[] = {BATCH}, ts[] = {BATCH, OUT};
  /* On the CPU: the trainer moves batches to the model's device. */
  f->x = kiln_test_tensor_f32(f->ctx, x, xs, 2, cpu);
  assert_kiln_ok(kiln_tensor_from_host(f->ctx, labels, sizeof labels, ys, 1, KILN_I64, cpu, &f->y[0]));
  f->y[1] = kiln_test_tensor_f32(f->ctx, mse, ts, 2, cpu);
  f->y[2] = kiln_test_tensor_f32(f->ctx, bce, ts, 2, cpu);
  /* Parameters of the size of every spec (they all have the same shapes),
   * f32 values so that every dtype starts from the same numbers. */
  f->n = IN * HIDDEN + HIDDEN + HIDDEN * OUT + OUT;
  f->params = malloc((size_t)f->n * sizeof *f->params);
  for (int64_t i = 0; i < f->n; ++i) f->params[i] = (float)kiln_test_rng_uniform(&rng, -0.5, 0.5);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kiln_tensor_release(f->x);
  for (int i = 0; i < 3; ++i) kiln_tensor_release(f->y[i]);
  free(f->params);
  kiln_context_release(f->ctx);
  free(f);
  return 0;
}

/* Runs the grid: for each layer and loss, the reference gradient's norm from
 * a plain SGD step at lr 1 on the reference (device, dtype), then every
 * optimizer at each precision on `dev` against the reference step. */
static void run_grid(fixture *f, kiln_device ref_dev, kiln_dtype ref_dtype, kiln_device dev,
                     const kiln_precision *precisions, int nprec) {
  const int64_t n = f->n;
  double *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
  double *grad = malloc((size_t)n * sizeof *grad);
  const double param_norm = norm2(f->params, n);
  const optim_case plain = {"sgd lr 1", KILN_OPTIM_SGD, 1.0, 0, 0};
  char dev_name[16];
  assert_kiln_ok(kiln_device_format(dev, dev_name, sizeof dev_name));
  for (int layer = 0; layer < NLAYERS; ++layer) {
    for (int loss = 0; loss < 3; ++loss) {
      run_step(f, layer, loss, &plain, KILN_PRECISION_FP32, ref_dev, ref_dtype, grad);
      for (int64_t i = 0; i < n; ++i) grad[i] = f->params[i] - grad[i];
      const double grad_norm = norm2(grad, n);
      assert_true(grad_norm > 1e-3); /* a step that moves something */
      for (size_t k = 0; k < sizeof optimizers / sizeof optimizers[0]; ++k) {
        const optim_case *o = &optimizers[k];
        const double want_loss = run_step(f, layer, loss, o, KILN_PRECISION_FP32, ref_dev, ref_dtype, want);
        for (int p = 0; p < nprec; ++p) {
          const double loss_got = run_step(f, layer, loss, o, precisions[p], dev, KILN_F32, got);
          char what[200];
          snprintf(what, sizeof what, "%s %s, %s, %s %s", layer_specs[layer], loss_names[loss], o->name, dev_name,
                   precision_name(precisions[p]));
          check_step(precisions[p], what, got, loss_got, want, want_loss, n, lipschitz(o), precision_rel(precisions[p]), grad_norm,
                     param_norm);
        }
      }
    }
  }
  for (int p = 0; p < nprec; ++p) {
    print_message("%s %s: worst distance %.3g of its bound\n", dev_name, precision_name(precisions[p]),
                  worst_ratio[precisions[p]]);
    worst_ratio[precisions[p]] = 0;
    if (precisions[p] != KILN_PRECISION_FP32) {
      print_message("%s %s: largest distance %.3g times fp32's bound\n", dev_name, precision_name(precisions[p]),
                    beyond_fp32[precisions[p]]);
      assert_true(beyond_fp32[precisions[p]] > 1);
    }
    beyond_fp32[precisions[p]] = 0;
  }
  free(want);
  free(got);
  free(grad);
}

/* CPU: fp32 and bf16 steps against the f64 model's step. bf16 is compared
 * with the f64 reference at bf16's rel, which bounds its distance to fp32 as
 * well (fp32's own distance is 4000x smaller). */
static void test_cpu_grid(void **state) {
  if (kiln_test_cuda_run()) skip();
  fixture *f = *state;
  const kiln_precision precisions[] = {KILN_PRECISION_FP32, KILN_PRECISION_BF16};
  run_grid(f, cpu, KILN_F64, cpu, precisions, 2);
}

/* bf16 against fp32 directly, on the same device, at bf16's rel. */
static void test_bf16_against_fp32(void **state) {
  fixture *f = *state;
  const kiln_device dev = kiln_test_device(f->ctx);
  const kiln_precision bf16[] = {KILN_PRECISION_BF16};
  run_grid(f, dev, KILN_F32, dev, bf16, 1);
}

/* CUDA fp32, tf32 and bf16 against CPU fp32. */
static void test_cuda_grid(void **state) {
  fixture *f = *state;
  kiln_device gpu;
  if (!kiln_test_gpu_cases(f->ctx, &gpu)) skip();
  const kiln_precision precisions[] = {KILN_PRECISION_FP32, KILN_PRECISION_TF32, KILN_PRECISION_BF16};
  run_grid(f, cpu, KILN_F32, gpu, precisions, 3);
}

static void test_refusals(void **state) {
  if (kiln_test_cuda_run()) skip();
  fixture *f = *state;
  kiln_trainer_options *opts = NULL;
  kiln_trainer *trainer = (kiln_trainer *)(uintptr_t)1;
  /* Values outside kiln_precision. */
  assert_kiln_ok(kiln_trainer_options_create(&opts));
  assert_status(kiln_trainer_options_set_precision(opts, (kiln_precision)3), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_precision(opts, (kiln_precision)-1), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_precision(NULL, KILN_PRECISION_FP32), KILN_ERROR_INVALID_ARGUMENT);
  kiln_trainer_options_release(opts);

  /* tf32 is a CUDA mode: refused for a CPU model, saying so. */
  kiln_model *model = make_model(f->ctx, layer_specs[0], cpu, KILN_F32);
  assert_kiln_ok(make_options(&optimizers[0], KILN_LOSS_CROSS_ENTROPY, KILN_PRECISION_TF32, &opts));
  assert_status(kiln_trainer_create(model, opts, &trainer), KILN_ERROR_NOT_SUPPORTED);
  assert_null(trainer);
  assert_last_error_contains("tf32");
  kiln_trainer_options_release(opts);
  kiln_model_release(model);

  /* bf16 (and tf32) need an f32 model. */
  model = make_model(f->ctx, layer_specs[0], cpu, KILN_F64);
  assert_kiln_ok(make_options(&optimizers[0], KILN_LOSS_CROSS_ENTROPY, KILN_PRECISION_BF16, &opts));
  trainer = (kiln_trainer *)(uintptr_t)1;
  assert_status(kiln_trainer_create(model, opts, &trainer), KILN_ERROR_NOT_SUPPORTED);
  assert_null(trainer);
  assert_last_error_contains("bf16");
  assert_last_error_contains("f64");
  kiln_trainer_options_release(opts);
  assert_kiln_ok(make_options(&optimizers[0], KILN_LOSS_CROSS_ENTROPY, KILN_PRECISION_TF32, &opts));
  assert_status(kiln_trainer_create(model, opts, &trainer), KILN_ERROR_NOT_SUPPORTED);
  kiln_trainer_options_release(opts);
  /* fp32 is the model's own dtype: an f64 model trains in f64. */
  assert_kiln_ok(make_options(&optimizers[0], KILN_LOSS_CROSS_ENTROPY, KILN_PRECISION_FP32, &opts));
  assert_kiln_ok(kiln_trainer_create(model, opts, &trainer));
  kiln_trainer_release(trainer);
  kiln_trainer_options_release(opts);
  kiln_model_release(model);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_cpu_grid),
      cmocka_unit_test(test_bf16_against_fp32),
      cmocka_unit_test(test_cuda_grid),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
