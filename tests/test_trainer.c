/* The trainer: optimizer updates against torch.optim's formulas evaluated
 * here, schedules against their closed forms, clipping, convergence,
 * determinism, cancellation, histories and error paths.
 *
 * Updates are checked on a single Linear(3, 2) in float64 with the MSE loss,
 * whose gradient has a closed form: dL/dpred = 2 (pred - t) / (B K),
 * dW = dpred^T x, db = column sums of dpred.
 *
 * Every case runs on the CPU (test_trainer) or on cuda:0 alone
 * (test_trainer_cuda, KILN_TEST_DEVICE=cuda; skipped without a device). */
#include "support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The device of every case: the CPU, or cuda:0 in the test_trainer_cuda run
 * (KILN_TEST_DEVICE=cuda), set by the group setup. f64 models are CPU-only,
 * so on CUDA the f64 cases run f32 models at f32 tolerances (model_dtype,
 * upd_rtol, upd_atol). */
static kiln_device dev = {KILN_DEVICE_CPU, -1};
static int gpu_run = 0;

static kiln_dtype model_dtype(kiln_dtype wanted) { return gpu_run ? KILN_F32 : wanted; }
/* Parameters after a few updates, against the float64 reference: f64 models
 * agree to rounding (1e-11); f32 models hold O(1) parameters to ~6e-8 per
 * rounding, a few roundings per step over 3 steps, and the f32-rounded x and
 * targets move the gradient by ~1e-7 relative: 1e-5 bounds that with a margin
 * while a wrong formula (an error of order lr * grad ~ 1e-2) still fails. */
static double upd_rtol(double f64) { return gpu_run ? 1e-5 : f64; }
static double upd_atol(double f64) { return gpu_run ? 1e-5 : f64; }

static int setup(void **state) {
  kiln_test_context_setup(state);
  dev = kiln_test_device(*state);
  gpu_run = dev.kind == KILN_DEVICE_CUDA;
  return 0;
}

enum { B = 4, IN = 3, OUT = 2, NP = OUT * IN + OUT };

static kiln_model *make_model(kiln_context *ctx, const char *text, kiln_dtype dtype) {
  return kiln_test_model_on(ctx, text, dev, model_dtype(dtype));
}

/* A Linear(in, out) model's parameters as [W (out * in), b (out)]. */
static void read_params(kiln_model *model, int64_t in, int64_t out, double *p) {
  kiln_tensor *w = NULL, *b = NULL;
  assert_kiln_ok(kiln_model_parameter(model, 0, &w));
  assert_kiln_ok(kiln_model_parameter(model, 1, &b));
  kiln_test_read_f64(w, p, out * in);
  kiln_test_read_f64(b, p + out * in, out);
  kiln_tensor_release(w);
  kiln_tensor_release(b);
}

/* Linear(3, 2) parameters as [W (6), b (2)]. */
static void read_linear(kiln_model *model, double *p) { read_params(model, IN, OUT, p); }

static void mse_grad(const double *p, const double *x, const double *t, double *g) {
  memset(g, 0, NP * sizeof *g);
  for (int r = 0; r < B; ++r)
    for (int o = 0; o < OUT; ++o) {
      double pred = p[OUT * IN + o];
      for (int i = 0; i < IN; ++i) pred += x[r * IN + i] * p[o * IN + i];
      const double d = 2 * (pred - t[r * OUT + o]) / (B * OUT);
      for (int i = 0; i < IN; ++i) g[o * IN + i] += d * x[r * IN + i];
      g[OUT * IN + o] += d;
    }
}

typedef struct {
  kiln_optimizer_kind kind;
  double lr, momentum, weight_decay;
  int nesterov;
  int set_weight_decay;
} optim_case;

/* One torch.optim step on host state. */
static void torch_step(const optim_case *c, double *p, const double *grad, double *m, double *v, int step) {
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  const double wd = c->set_weight_decay ? c->weight_decay : (c->kind == KILN_OPTIM_ADAMW ? 0.01 : 0.0);
  for (int i = 0; i < NP; ++i) {
    double g = grad[i];
    if (c->kind == KILN_OPTIM_SGD) {
      g += wd * p[i];
      if (c->momentum != 0) {
        m[i] = step == 1 ? g : c->momentum * m[i] + g;
        g = c->nesterov ? g + c->momentum * m[i] : m[i];
      }
      p[i] -= c->lr * g;
    } else {
      if (c->kind == KILN_OPTIM_ADAMW)
        p[i] *= 1 - c->lr * wd;
      else
        g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
      p[i] -= c->lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
    }
  }
}

static void check_optimizer(kiln_context *ctx, const optim_case *c) {
  kiln_model *model = make_model(ctx, "linear(3,2)", KILN_F64);
  kiln_test_rng rng = kiln_test_rng_make(11);
  double x[B * IN], t[B * OUT];
  kiln_test_fill_uniform_f64(&rng, x, B * IN, -1, 1);
  kiln_test_fill_uniform_f64(&rng, t, B * OUT, -1, 1);
  const int64_t xs[] = {B, IN}, ts[] = {B, OUT};
  kiln_tensor *xt = kiln_test_tensor_f64(ctx, x, xs, 2, dev), *tt = kiln_test_tensor_f64(ctx, t, ts, 2, dev);
  kiln_trainer_options *o = NULL;
  kiln_trainer *trainer = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_loss(o, KILN_LOSS_MSE));
  assert_kiln_ok(kiln_trainer_options_set_optimizer(o, c->kind));
  assert_kiln_ok(kiln_trainer_options_set_lr(o, c->lr));
  assert_kiln_ok(kiln_trainer_options_set_momentum(o, c->momentum));
  assert_kiln_ok(kiln_trainer_options_set_nesterov(o, c->nesterov));
  if (c->set_weight_decay) assert_kiln_ok(kiln_trainer_options_set_weight_decay(o, c->weight_decay));
  assert_kiln_ok(kiln_trainer_create(model, o, &trainer));

  double p[NP], g[NP], m[NP] = {0}, v[NP] = {0}, got[NP];
  read_linear(model, p);
  for (int step = 1; step <= 3; ++step) {
    mse_grad(p, x, t, g);
    torch_step(c, p, g, m, v, step);
    assert_kiln_ok(kiln_trainer_step(trainer, xt, tt, NULL));
    read_linear(model, got);
    assert_allclose(got, p, NP, upd_rtol(1e-11), upd_atol(1e-13));
  }
  int64_t steps = 0;
  assert_kiln_ok(kiln_trainer_steps_done(trainer, &steps));
  assert_int_equal(steps, 3);
  kiln_trainer_release(trainer);
  kiln_trainer_options_release(o);
  kiln_tensor_release(xt);
  kiln_tensor_release(tt);
  kiln_model_release(model);
}

static void test_optimizers_match_torch(void **state) {
  kiln_context *ctx = *state;
  static const optim_case cases[] = {
      {KILN_OPTIM_SGD, 0.1, 0, 0, 0, 0},
      {KILN_OPTIM_SGD, 0.1, 0.9, 0, 0, 0},
      {KILN_OPTIM_SGD, 0.1, 0.9, 0.05, 1, 1},
      {KILN_OPTIM_SGD, 0.05, 0.5, 0.1, 0, 1},
      {KILN_OPTIM_ADAM, 0.01, 0, 0, 0, 0},
      {KILN_OPTIM_ADAM, 0.01, 0, 0.1, 0, 1},
      {KILN_OPTIM_ADAMW, 0.01, 0, 0, 0, 0}, /* AdamW's default weight decay 0.01 */
      {KILN_OPTIM_ADAMW, 0.01, 0, 0.3, 0, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) check_optimizer(ctx, &cases[i]);
}

/* ---- cross-entropy with label smoothing ---------------------------------
 * Two float64 references for a Linear(LS_IN, LS_C) model on one batch:
 * the smoothed target distribution q (q_c = (1 - e) [c = y] + e / C, loss
 * -sum_c q_c log p_c, gradient softmax - q), and PyTorch's definition of
 * CrossEntropyLoss(label_smoothing=e) with mean reduction,
 * (1 - e) * mean_i(-log p_{i,y_i}) + e * mean_i(mean_c(-log p_{i,c})),
 * differentiated by central differences. */
enum { LS_B = 5, LS_IN = 3, LS_C = 4, LS_NP = LS_C * LS_IN + LS_C };

static void ls_log_softmax(const double *p, const double *x, double *logp) {
  for (int c = 0; c < LS_C; ++c) {
    logp[c] = p[LS_C * LS_IN + c];
    for (int i = 0; i < LS_IN; ++i) logp[c] += x[i] * p[c * LS_IN + i];
  }
  double mx = logp[0], sum = 0;
  for (int c = 1; c < LS_C; ++c) mx = fmax(mx, logp[c]);
  for (int c = 0; c < LS_C; ++c) sum += exp(logp[c] - mx);
  for (int c = 0; c < LS_C; ++c) logp[c] -= mx + log(sum);
}

/* PyTorch's formula. */
static double ls_torch_loss(const double *p, const double *x, const int64_t *y, double e) {
  double nll = 0, smooth = 0;
  for (int r = 0; r < LS_B; ++r) {
    double logp[LS_C];
    ls_log_softmax(p, x + r * LS_IN, logp);
    nll += -logp[y[r]] / LS_B;
    for (int c = 0; c < LS_C; ++c) smooth += -logp[c] / (LS_C * LS_B);
  }
  return (1 - e) * nll + e * smooth;
}

/* The smoothed-target form: the loss, and the gradient into g. */
static double ls_target_loss(const double *p, const double *x, const int64_t *y, double e, double *g) {
  double loss = 0;
  memset(g, 0, LS_NP * sizeof *g);
  for (int r = 0; r < LS_B; ++r) {
    double logp[LS_C];
    ls_log_softmax(p, x + r * LS_IN, logp);
    for (int c = 0; c < LS_C; ++c) {
      const double q = (1 - e) * (c == y[r]) + e / LS_C;
      loss -= q * logp[c] / LS_B;
      const double dz = (exp(logp[c]) - q) / LS_B;
      for (int i = 0; i < LS_IN; ++i) g[c * LS_IN + i] += dz * x[r * LS_IN + i];
      g[LS_C * LS_IN + c] += dz;
    }
  }
  return loss;
}

static void test_label_smoothing(void **state) {
  kiln_context *ctx = *state;
  kiln_test_rng rng = kiln_test_rng_make(23);
  double x[LS_B * LS_IN];
  kiln_test_fill_uniform_f64(&rng, x, LS_B * LS_IN, -2, 2);
  const int64_t y[LS_B] = {0, 3, 1, 3, 2};
  const int64_t xs[] = {LS_B, LS_IN}, ys[] = {LS_B};
  kiln_tensor *xt = kiln_test_tensor_f64(ctx, x, xs, 2, dev), *yt = NULL;
  assert_kiln_ok(kiln_tensor_from_host(ctx, y, sizeof y, ys, 1, KILN_I64, dev, &yt));
  const double lr = 0.5;
  for (int k = 0; k < 3; ++k) {
    const double e = (double[]){0.0, 0.25, 1.0}[k];
    kiln_model *model = make_model(ctx, "linear(3,4)", KILN_F64);
    kiln_trainer_options *o = NULL;
    kiln_trainer *trainer = NULL;
    assert_kiln_ok(kiln_trainer_options_create(&o));
    assert_kiln_ok(kiln_trainer_options_set_lr(o, lr));
    assert_kiln_ok(kiln_trainer_options_set_label_smoothing(o, e));
    assert_kiln_ok(kiln_trainer_create(model, o, &trainer));
    kiln_trainer_options_release(o);

    double p[LS_NP], g[LS_NP], fd[LS_NP], got[LS_NP];
    read_params(model, LS_IN, LS_C, p);
    const double want = ls_target_loss(p, x, y, e, g);
    const double torch = ls_torch_loss(p, x, y, e);
    assert_allclose(&torch, &want, 1, 1e-13, 0); /* the two definitions agree */
    for (int i = 0; i < LS_NP; ++i) {
      double pp[LS_NP], pm[LS_NP];
      memcpy(pp, p, sizeof pp);
      memcpy(pm, p, sizeof pm);
      pp[i] += 1e-6;
      pm[i] -= 1e-6;
      fd[i] = (ls_torch_loss(pp, x, y, e) - ls_torch_loss(pm, x, y, e)) / 2e-6;
    }
    assert_allclose(g, fd, LS_NP, 1e-6, 1e-9);

    double loss = 0;
    assert_kiln_ok(kiln_trainer_step(trainer, xt, yt, &loss));
    assert_allclose(&loss, &want, 1, upd_rtol(1e-12), upd_atol(1e-14));
    for (int i = 0; i < LS_NP; ++i) p[i] -= lr * g[i];
    read_params(model, LS_IN, LS_C, got);
    assert_allclose(got, p, LS_NP, upd_rtol(1e-11), upd_atol(1e-13));
    /* Evaluation reports the smoothed loss too (of the updated weights). */
    kiln_dataset *ds = NULL;
    assert_kiln_ok(kiln_dataset_from_tensors(ctx, xt, yt, &ds));
    double eval_loss = 0, accuracy = 0;
    assert_kiln_ok(kiln_trainer_evaluate(trainer, ds, &eval_loss, &accuracy));
    const double eval_want = ls_torch_loss(got, x, y, e);
    assert_allclose(&eval_loss, &eval_want, 1, upd_rtol(1e-12), upd_atol(1e-14));
    kiln_dataset_release(ds);
    kiln_trainer_release(trainer);
    kiln_model_release(model);
  }

  /* Its range, and the losses it applies to. */
  kiln_trainer_options *o = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_status(kiln_trainer_options_set_label_smoothing(o, -0.1), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("label_smoothing must be in [0, 1], got -0.1");
  assert_status(kiln_trainer_options_set_label_smoothing(o, 1.5), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_label_smoothing(o, NAN), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_label_smoothing(NULL, 0.1), KILN_ERROR_INVALID_ARGUMENT);
  assert_kiln_ok(kiln_trainer_options_set_label_smoothing(o, 0.1));
  assert_kiln_ok(kiln_trainer_options_set_loss(o, KILN_LOSS_MSE));
  kiln_model *model = make_model(ctx, "linear(3,4)", KILN_F64);
  kiln_trainer *trainer = (kiln_trainer *)(uintptr_t)1;
  assert_status(kiln_trainer_create(model, o, &trainer), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(trainer);
  assert_last_error_contains("label smoothing applies to the cross-entropy loss, not MSE");
  kiln_trainer_options_release(o);
  kiln_model_release(model);
  kiln_tensor_release(xt);
  kiln_tensor_release(yt);
}

/* An epoch's steps each take their own optimizer step count and scheduled
 * learning rate: 12 identical samples (so any order makes the same batches)
 * in batches of 4 are 3 Adam steps per epoch; over 2 epochs, with the step
 * schedule halving lr every step, the weights follow torch.optim.Adam's 6
 * updates evaluated here in float64. */
static void test_epoch_steps_follow_adam_and_schedule(void **state) {
  kiln_context *ctx = *state;
  enum { N = 12 };
  kiln_test_rng rng = kiln_test_rng_make(17);
  double row[IN], target[OUT], x[N * IN], t[N * OUT], xb[B * IN], tb[B * OUT];
  kiln_test_fill_uniform_f64(&rng, row, IN, -1, 1);
  kiln_test_fill_uniform_f64(&rng, target, OUT, -1, 1);
  for (int r = 0; r < N; ++r) {
    memcpy(x + r * IN, row, sizeof row);
    memcpy(t + r * OUT, target, sizeof target);
  }
  memcpy(xb, x, sizeof xb); /* one batch of B identical rows, for mse_grad */
  memcpy(tb, t, sizeof tb);
  const int64_t xs[] = {N, IN}, ts[] = {N, OUT};
  kiln_tensor *xt = kiln_test_tensor_f64(ctx, x, xs, 2, dev), *tt = kiln_test_tensor_f64(ctx, t, ts, 2, dev);
  kiln_dataset *ds = NULL;
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, xt, tt, &ds));
  kiln_model *model = make_model(ctx, "linear(3,2)", KILN_F64);
  kiln_trainer_options *o = NULL;
  kiln_trainer *trainer = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_loss(o, KILN_LOSS_MSE));
  assert_kiln_ok(kiln_trainer_options_set_optimizer(o, KILN_OPTIM_ADAM));
  assert_kiln_ok(kiln_trainer_options_set_lr(o, 0.1));
  assert_kiln_ok(kiln_trainer_options_set_batch_size(o, B));
  assert_kiln_ok(kiln_trainer_options_set_schedule(o, KILN_LR_STEP, 1, 0.5, 0, 0));
  assert_kiln_ok(kiln_trainer_create(model, o, &trainer));
  kiln_trainer_options_release(o);

  double p[NP], g[NP], m[NP] = {0}, v[NP] = {0}, got[NP];
  read_linear(model, p);
  int step = 0;
  for (int e = 0; e < 2; ++e) {
    for (int k = 0; k < N / B; ++k) {
      ++step;
      const optim_case c = {KILN_OPTIM_ADAM, 0.1 * pow(0.5, step - 1), 0, 0, 0, 0};
      mse_grad(p, xb, tb, g);
      torch_step(&c, p, g, m, v, step);
    }
    kiln_epoch_stats s = {sizeof s};
    assert_kiln_ok(kiln_trainer_epoch(trainer, ds, &s));
    read_linear(model, got);
    assert_allclose(got, p, NP, upd_rtol(1e-11), upd_atol(1e-13));
  }
  kiln_trainer_release(trainer);
  kiln_dataset_release(ds);
  kiln_tensor_release(xt);
  kiln_tensor_release(tt);
  kiln_model_release(model);
}

/* Global-norm clipping: with SGD at lr 1, the update is g * max / (|g| + 1e-6)
 * when |g| exceeds max, and g itself otherwise (a small gradient is never
 * scaled up towards max). */
static void check_clipped_step(kiln_context *ctx, double max_norm, int expect_clip) {
  kiln_model *model = make_model(ctx, "linear(3,2)", KILN_F64);
  kiln_test_rng rng = kiln_test_rng_make(12);
  double x[B * IN], t[B * OUT], p[NP], g[NP], got[NP];
  kiln_test_fill_uniform_f64(&rng, x, B * IN, -1, 1);
  kiln_test_fill_uniform_f64(&rng, t, B * OUT, 2, 3);
  const int64_t xs[] = {B, IN}, ts[] = {B, OUT};
  kiln_tensor *xt = kiln_test_tensor_f64(ctx, x, xs, 2, dev), *tt = kiln_test_tensor_f64(ctx, t, ts, 2, dev);
  kiln_trainer_options *o = NULL;
  kiln_trainer *trainer = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_loss(o, KILN_LOSS_MSE));
  assert_kiln_ok(kiln_trainer_options_set_lr(o, 1.0));
  assert_kiln_ok(kiln_trainer_options_set_grad_clip(o, max_norm));
  assert_kiln_ok(kiln_trainer_create(model, o, &trainer));
  read_linear(model, p);
  mse_grad(p, x, t, g);
  double norm = 0;
  for (int i = 0; i < NP; ++i) norm += g[i] * g[i];
  norm = sqrt(norm);
  assert_int_equal(norm > max_norm, expect_clip); /* the case is what it claims */
  const double factor = expect_clip ? max_norm / (norm + 1e-6) : 1.0;
  for (int i = 0; i < NP; ++i) p[i] -= g[i] * factor;
  assert_kiln_ok(kiln_trainer_step(trainer, xt, tt, NULL));
  read_linear(model, got);
  assert_allclose(got, p, NP, upd_rtol(1e-12), upd_atol(1e-14));
  kiln_trainer_release(trainer);
  kiln_trainer_options_release(o);
  kiln_tensor_release(xt);
  kiln_tensor_release(tt);
  kiln_model_release(model);
}

static void test_grad_clipping(void **state) {
  kiln_context *ctx = *state;
  check_clipped_step(ctx, 0.05, 1);
  check_clipped_step(ctx, 1e3, 0); /* far above the norm: the plain SGD step */
}

/* ---- schedules -------------------------------------------------------------- */

typedef struct {
  kiln_context *ctx;
  kiln_model *model;
  kiln_tensor *x, *y;
} tiny;

static tiny tiny_make(kiln_context *ctx) {
  tiny s;
  s.ctx = ctx;
  s.model = make_model(ctx, "linear(3,2)", KILN_F64);
  double x[B * IN] = {0};
  int64_t y[B] = {0, 1, 0, 1};
  const int64_t xs[] = {B, IN}, ys[] = {B};
  s.x = kiln_test_tensor_f64(ctx, x, xs, 2, dev);
  assert_kiln_ok(kiln_tensor_from_host(ctx, y, sizeof y, ys, 1, KILN_I64, dev, &s.y));
  return s;
}

static void tiny_free(tiny *s) {
  kiln_tensor_release(s->x);
  kiln_tensor_release(s->y);
  kiln_model_release(s->model);
}

static void check_schedule(kiln_context *ctx, kiln_lr_schedule kind, int64_t step_size, double gamma, int64_t total,
                           double min_lr, int64_t warmup, const double *want, int n) {
  tiny s = tiny_make(ctx);
  kiln_trainer_options *o = NULL;
  kiln_trainer *trainer = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_lr(o, 0.5));
  assert_kiln_ok(kiln_trainer_options_set_schedule(o, kind, step_size, gamma, total, min_lr));
  assert_kiln_ok(kiln_trainer_options_set_warmup(o, warmup));
  assert_kiln_ok(kiln_trainer_create(s.model, o, &trainer));
  for (int t = 0; t < n; ++t) {
    double lr = -1;
    assert_kiln_ok(kiln_trainer_current_lr(trainer, &lr));
    assert_allclose(&lr, &want[t], 1, 1e-14, 0);
    assert_kiln_ok(kiln_trainer_step(trainer, s.x, s.y, NULL));
  }
  kiln_trainer_release(trainer);
  kiln_trainer_options_release(o);
  tiny_free(&s);
}

static void test_schedules(void **state) {
  kiln_context *ctx = *state;
  const double pi = 3.14159265358979323846;
  double want[8];
  for (int t = 0; t < 8; ++t) want[t] = 0.5;
  check_schedule(ctx, KILN_LR_CONSTANT, 1, 0.1, 0, 0, 0, want, 8);
  for (int t = 0; t < 8; ++t) want[t] = 0.5 * pow(0.5, t / 3);
  check_schedule(ctx, KILN_LR_STEP, 3, 0.5, 0, 0, 0, want, 8);
  for (int t = 0; t < 8; ++t) want[t] = t < 5 ? 0.01 + (0.5 - 0.01) * (1 + cos(pi * t / 5)) / 2 : 0.01;
  check_schedule(ctx, KILN_LR_COSINE, 1, 0.1, 5, 0.01, 0, want, 8);
  for (int t = 0; t < 8; ++t) want[t] = 0.5 * pow(0.1, t / 2) * (t < 4 ? (t + 1) / 4.0 : 1.0);
  check_schedule(ctx, KILN_LR_STEP, 2, 0.1, 0, 0, 4, want, 8);
  for (int t = 0; t < 8; ++t) want[t] = 0.5 * (t < 3 ? (t + 1) / 3.0 : 1.0);
  check_schedule(ctx, KILN_LR_CONSTANT, 1, 0.1, 0, 0, 3, want, 8);

  /* Cosine with total_steps 0 spans a fit; outside one it is an error. */
  tiny s = tiny_make(ctx);
  kiln_trainer_options *o = NULL;
  kiln_trainer *trainer = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_lr(o, 0.5));
  assert_kiln_ok(kiln_trainer_options_set_batch_size(o, 2));
  assert_kiln_ok(kiln_trainer_options_set_schedule(o, KILN_LR_COSINE, 1, 0.1, 0, 0.1));
  assert_kiln_ok(kiln_trainer_create(s.model, o, &trainer));
  double lr = 1;
  assert_status(kiln_trainer_current_lr(trainer, &lr), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("total_steps");
  assert_status(kiln_trainer_step(trainer, s.x, s.y, NULL), KILN_ERROR_INVALID_ARGUMENT);
  kiln_dataset *ds = NULL;
  kiln_history *h = NULL;
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, s.x, s.y, &ds));
  assert_kiln_ok(kiln_trainer_fit(trainer, ds, NULL, 2, NULL, NULL, &h)); /* 2 epochs x 2 batches: T = 4 */
  kiln_epoch_stats e = {sizeof e};
  assert_kiln_ok(kiln_history_get(h, 0, &e));
  double w = 0.1 + (0.5 - 0.1) * (1 + cos(pi * 2 / 4)) / 2;
  assert_allclose(&e.lr, &w, 1, 1e-14, 0);
  assert_kiln_ok(kiln_history_get(h, 1, &e));
  w = 0.1;
  assert_allclose(&e.lr, &w, 1, 1e-14, 0);
  kiln_history_release(h);
  kiln_dataset_release(ds);
  kiln_trainer_release(trainer);

  /* Bad schedule values. */
  assert_status(kiln_trainer_options_set_schedule(o, KILN_LR_STEP, 0, 0.1, 0, 0), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("step_size must be >= 1, got 0 (with the step schedule)");
  /* The step schedule's values are ignored by the others, and not checked. */
  assert_kiln_ok(kiln_trainer_options_set_schedule(o, KILN_LR_COSINE, 0, -1, 10, 0));
  assert_status(kiln_trainer_options_set_schedule(o, KILN_LR_STEP, 1, -1, 0, 0), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_schedule(o, KILN_LR_COSINE, 1, 0.1, -5, 0), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_schedule(o, (kiln_lr_schedule)9, 1, 0.1, 0, 0), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_warmup(o, -1), KILN_ERROR_INVALID_ARGUMENT);
  kiln_trainer_options_release(o);
  tiny_free(&s);
}

/* ---- training on data ------------------------------------------------------------ */

/* Three classes in the plane, separated by the lines of three fixed linear
 * scores (label = argmax), with a margin. */
static kiln_dataset *separable(kiln_context *ctx, int64_t n, uint64_t seed) {
  kiln_test_rng rng = kiln_test_rng_make(seed);
  float *x = malloc((size_t)n * 2 * sizeof *x);
  int64_t *y = malloc((size_t)n * sizeof *y);
  static const double w[3][2] = {{1, 0}, {-0.5, 0.87}, {-0.5, -0.87}};
  for (int64_t i = 0; i < n;) {
    double a = kiln_test_rng_uniform(&rng, -2, 2), b = kiln_test_rng_uniform(&rng, -2, 2), s[3];
    for (int k = 0; k < 3; ++k) s[k] = w[k][0] * a + w[k][1] * b;
    int best = s[1] > s[0] ? 1 : 0;
    if (s[2] > s[best]) best = 2;
    double second = -1e9;
    for (int k = 0; k < 3; ++k)
      if (k != best && s[k] > second) second = s[k];
    if (s[best] - second < 0.1) continue;
    x[2 * i] = (float)a;
    x[2 * i + 1] = (float)b;
    y[i++] = best;
  }
  const int64_t xs[] = {n, 2}, ys[] = {n};
  kiln_tensor *xt = kiln_test_tensor_f32(ctx, x, xs, 2, dev), *yt = NULL;
  assert_kiln_ok(kiln_tensor_from_host(ctx, y, n * (int64_t)sizeof *y, ys, 1, KILN_I64, dev, &yt));
  kiln_dataset *ds = NULL;
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, xt, yt, &ds));
  kiln_tensor_release(xt);
  kiln_tensor_release(yt);
  free(x);
  free(y);
  return ds;
}

static kiln_trainer *make_trainer(kiln_model *model, kiln_optimizer_kind kind, double lr, int64_t batch,
                                  uint64_t seed, int64_t interval) {
  kiln_trainer_options *o = NULL;
  kiln_trainer *trainer = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_optimizer(o, kind));
  assert_kiln_ok(kiln_trainer_options_set_lr(o, lr));
  assert_kiln_ok(kiln_trainer_options_set_batch_size(o, batch));
  assert_kiln_ok(kiln_trainer_options_set_shuffle_seed(o, seed));
  assert_kiln_ok(kiln_trainer_options_set_progress_interval(o, interval));
  assert_kiln_ok(kiln_trainer_create(model, o, &trainer));
  kiln_trainer_options_release(o);
  return trainer;
}

static void test_convergence_and_history(void **state) {
  kiln_context *ctx = *state;
  kiln_dataset *train = separable(ctx, 600, 1), *val = separable(ctx, 200, 2);
  kiln_model *model = make_model(ctx, "2-16-3", KILN_F32);
  kiln_trainer *trainer = make_trainer(model, KILN_OPTIM_ADAM, 0.01, 32, 5, 0);
  kiln_history *h = NULL;
  assert_kiln_ok(kiln_trainer_fit(trainer, train, val, 25, NULL, NULL, &h));
  int64_t n = 0, epochs = 0;
  assert_kiln_ok(kiln_history_size(h, &n));
  assert_int_equal(n, 25);
  assert_kiln_ok(kiln_trainer_epochs_done(trainer, &epochs));
  assert_int_equal(epochs, 25);
  kiln_epoch_stats first = {sizeof first}, last = {sizeof last};
  assert_kiln_ok(kiln_history_get(h, 0, &first));
  assert_kiln_ok(kiln_history_get(h, 24, &last));
  assert_int_equal(first.epoch, 1);
  assert_int_equal(last.epoch, 25);
  assert_true(last.has_validation);
  assert_true(last.train_loss < first.train_loss);
  assert_true(last.samples_per_second > 0 && last.seconds > 0);
  double lr = 0.01;
  assert_allclose(&last.lr, &lr, 1, 0, 0);
  double loss = 0, acc = 0;
  assert_kiln_ok(kiln_trainer_evaluate(trainer, val, &loss, &acc));
  print_message("separable: train acc %.4f, validation acc %.4f\n", last.train_accuracy, acc);
  /* The classes are separated by a margin (separable()), so the true
   * accuracy is 1, and 25 epochs reach it (CPU: validation and the last
   * epoch's train accuracy 1.0000 from these seeds). */
  assert_true(acc == 1.0);
  assert_true(last.train_accuracy == 1.0);
  /* The history's validation numbers are evaluate's on the final model. */
  assert_allclose(&last.val_loss, &loss, 1, 1e-12, 0);
  assert_allclose(&last.val_accuracy, &acc, 1, 0, 0);
  /* fit leaves the model in training mode. */
  int training = 0;
  assert_kiln_ok(kiln_model_is_training(model, &training));
  assert_int_equal(training, 1);
  kiln_epoch_stats bad = {sizeof bad};
  assert_status(kiln_history_get(h, 25, &bad), KILN_ERROR_INVALID_ARGUMENT);
  assert_int_equal(bad.struct_size, sizeof bad);
  assert_int_equal(bad.epoch, 0);
  kiln_history_release(h);
  kiln_trainer_release(trainer);
  kiln_model_release(model);
  kiln_dataset_release(train);
  kiln_dataset_release(val);
}

static void train_run(uint64_t seed, const char *spec, double *weights, int64_t n) {
  kiln_context *ctx = kiln_test_context_create(seed);
  kiln_dataset *train = separable(ctx, 300, 3);
  kiln_model *model = make_model(ctx, spec, KILN_F32);
  kiln_trainer *trainer = make_trainer(model, KILN_OPTIM_SGD, 0.1, 16, 9, 0);
  kiln_history *h = NULL;
  assert_kiln_ok(kiln_trainer_fit(trainer, train, NULL, 3, NULL, NULL, &h));
  assert_int_equal(kiln_test_read_params(model, weights, n), n);
  kiln_history_release(h);
  kiln_trainer_release(trainer);
  kiln_model_release(model);
  kiln_dataset_release(train);
  kiln_context_release(ctx);
}

static void test_determinism(void **state) {
  (void)state;
  enum { N = 2 * 16 + 16 + 16 * 3 + 3 };
  double a[N], b[N], c[N];
  train_run(77, "2-16-3:dropout=0.2", a, N);
  train_run(77, "2-16-3:dropout=0.2", b, N);
  train_run(78, "2-16-3:dropout=0.2", c, N);
  assert_memory_equal(a, b, sizeof a);
  assert_true(memcmp(a, c, sizeof a) != 0);
}

/* A model ending in Softmax or LogSoftmax trains the logits under it with
 * the cross-entropy loss: the same weights, to the bit, as the model without
 * it; the other losses, and a model without parameters, are refused. */
static void test_output_transform_training(void **state) {
  enum { N = 2 * 16 + 16 + 16 * 3 + 3 };
  double plain[N], soft[N], log_soft[N];
  train_run(77, "2-16-3:dropout=0.2", plain, N);
  train_run(77, "2-16-3:dropout=0.2:softmax", soft, N);
  train_run(77, "2-16-3:dropout=0.2:log_softmax", log_soft, N);
  assert_memory_equal(plain, soft, sizeof plain);
  assert_memory_equal(plain, log_soft, sizeof plain);

  kiln_context *ctx = *state;
  kiln_model *model = make_model(ctx, "4-3:log_softmax", KILN_F32);
  kiln_trainer_options *o = NULL;
  kiln_trainer *trainer = (kiln_trainer *)(uintptr_t)1;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  for (int loss = KILN_LOSS_MSE; loss <= KILN_LOSS_BCE_WITH_LOGITS; ++loss) {
    assert_kiln_ok(kiln_trainer_options_set_loss(o, (kiln_loss_kind)loss));
    assert_status(kiln_trainer_create(model, o, &trainer), KILN_ERROR_INVALID_ARGUMENT);
    assert_null(trainer);
    assert_last_error_contains("ends in log_softmax, its output transform");
    assert_last_error_contains("cross-entropy loss, which takes logits");
  }
  kiln_model_release(model);
  model = make_model(ctx, "input(4);elu", KILN_F32);
  assert_kiln_ok(kiln_trainer_options_set_loss(o, KILN_LOSS_CROSS_ENTROPY));
  assert_status(kiln_trainer_create(model, o, &trainer), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("has no parameters to train");
  kiln_model_release(model);
  kiln_trainer_options_release(o);
}

typedef struct {
  int batch_calls, epoch_calls;
  int stop_at_batch; /* cancel on this BATCH call (1-based), 0 = never */
  int64_t last_batch;
} progress_log;

static int on_progress(void *user, const kiln_progress *p) {
  progress_log *log = user;
  assert_int_equal(p->struct_size, sizeof *p);
  if (p->phase == KILN_PROGRESS_BATCH) {
    ++log->batch_calls;
    assert_null(p->stats);
    assert_true(p->loss > 0);
    log->last_batch = p->batch;
    return log->stop_at_batch == log->batch_calls;
  }
  ++log->epoch_calls;
  assert_non_null(p->stats);
  assert_int_equal(p->stats->epoch, p->epoch);
  return 0;
}

static void test_progress_and_cancel(void **state) {
  kiln_context *ctx = *state;
  kiln_dataset *train = separable(ctx, 100, 4); /* 10 batches of 10 */
  kiln_model *model = make_model(ctx, "2-8-3", KILN_F32);
  kiln_trainer *trainer = make_trainer(model, KILN_OPTIM_SGD, 0.1, 10, 1, 3);
  progress_log log = {0, 0, 0, 0};
  kiln_history *h = NULL;
  assert_kiln_ok(kiln_trainer_fit(trainer, train, NULL, 2, on_progress, &log, &h));
  assert_int_equal(log.batch_calls, 6); /* after batches 3, 6, 9 of each epoch */
  assert_int_equal(log.epoch_calls, 2);
  assert_int_equal(log.last_batch, 9);
  kiln_history_release(h);

  /* Cancel at the second report: after batch 6 of the next epoch. */
  double before[8 * 2], after[8 * 2];
  kiln_tensor *w = NULL;
  assert_kiln_ok(kiln_model_parameter(model, 0, &w));
  kiln_test_read_f64(w, before, 16);
  progress_log stop = {0, 0, 2, 0};
  h = (kiln_history *)(uintptr_t)1;
  assert_status(kiln_trainer_fit(trainer, train, NULL, 5, on_progress, &stop, &h), KILN_ERROR_CANCELLED);
  assert_null(h);
  assert_last_error_contains("cancelled");
  int64_t steps = 0, epochs = 0;
  assert_kiln_ok(kiln_trainer_steps_done(trainer, &steps));
  assert_kiln_ok(kiln_trainer_epochs_done(trainer, &epochs));
  assert_int_equal(steps, 20 + 6);
  assert_int_equal(epochs, 2);
  kiln_test_read_f64(w, after, 16);
  assert_true(memcmp(before, after, sizeof before) != 0); /* the updates stay */
  kiln_tensor_release(w);
  kiln_trainer_release(trainer);
  kiln_model_release(model);
  kiln_dataset_release(train);
}

static void test_epoch_pull_form(void **state) {
  kiln_context *ctx = *state;
  kiln_dataset *train = separable(ctx, 50, 6);
  kiln_model *model = make_model(ctx, "2-8-3", KILN_F32);
  kiln_trainer *trainer = make_trainer(model, KILN_OPTIM_SGD, 0.1, 16, 1, 0);
  kiln_epoch_stats s = {sizeof s};
  assert_kiln_ok(kiln_trainer_epoch(trainer, train, &s));
  assert_int_equal(s.struct_size, sizeof s);
  assert_int_equal(s.epoch, 1);
  assert_true(s.train_loss > 0 && s.train_accuracy >= 0 && s.train_accuracy <= 1);
  assert_int_equal(s.has_validation, 0);
  int64_t steps = 0;
  assert_kiln_ok(kiln_trainer_steps_done(trainer, &steps));
  assert_int_equal(steps, 4); /* 16 + 16 + 16 + 2 */
  /* An older, smaller struct is filled only up to its size. */
  unsigned char raw[sizeof(kiln_epoch_stats) + 8];
  memset(raw, 0xAB, sizeof raw);
  kiln_epoch_stats *small = (kiln_epoch_stats *)raw;
  small->struct_size = 24;
  assert_kiln_ok(kiln_trainer_epoch(trainer, train, small));
  assert_int_equal(small->epoch, 2);
  assert_int_equal(raw[24], 0xAB);
  kiln_epoch_stats zero = {0};
  assert_status(kiln_trainer_epoch(trainer, train, &zero), KILN_ERROR_INVALID_ARGUMENT);
  kiln_trainer_release(trainer);
  kiln_model_release(model);
  kiln_dataset_release(train);
}

/* ---- what evaluation and epochs count ---------------------------------------- */

/* Accuracy counts a row as correct when its label is the first of its tied
 * maximum logits, as PyTorch's argmax does ("the indices of the first maximal
 * value are returned"), in evaluation, in an epoch's train accuracy and in
 * kiln_model_predict's classes. Linear(3, 4) without bias, its weights set
 * so that one-hot inputs give the columns of W as logits (exact in f32). */
static void test_tied_logits_count_the_first_maximum(void **state) {
  kiln_context *ctx = *state;
  kiln_model *model = make_model(ctx, "linear(3,4,nobias)", KILN_F64);
  /* Columns: [2,2,1,0] ties 0 and 1; [0,3,1,3] ties 1 and 3; [1,0,5,5] ties 2 and 3. */
  const double w[4 * 3] = {2, 0, 1, 2, 3, 0, 1, 1, 5, 0, 3, 5};
  kiln_tensor *wt = NULL;
  assert_kiln_ok(kiln_model_parameter(model, 0, &wt));
  kiln_test_write_f64(wt, w, 12);
  kiln_tensor_release(wt);
  enum { N = 8 };
  /* Inputs e0, e0, e0, e1, e1, e2, 0, 0 (the zero input ties all four). */
  float x[N * 3] = {0};
  const int which[N] = {0, 0, 0, 1, 1, 2, -1, -1};
  for (int r = 0; r < N; ++r)
    if (which[r] >= 0) x[r * 3 + which[r]] = 1;
  const int64_t labels[N] = {0, 0, 1, 1, 3, 2, 0, 2};
  const int64_t first[N] = {0, 0, 0, 1, 1, 2, 0, 0}; /* the first maximum of each row */
  int correct = 0;
  for (int r = 0; r < N; ++r) correct += labels[r] == first[r];
  const double want_acc = correct / (double)N; /* 5/8; the last maximum would give 2/8 */
  kiln_dataset *ds = kiln_test_dataset(ctx, x, labels, N, 3, dev);

  kiln_trainer *trainer = make_trainer(model, KILN_OPTIM_SGD, 0, 3, 1, 0); /* lr 0: the weights stay */
  double loss = 0, acc = -1;
  assert_kiln_ok(kiln_trainer_evaluate(trainer, ds, &loss, &acc));
  assert_allclose(&acc, &want_acc, 1, 0, 0);
  kiln_epoch_stats s = {sizeof s};
  assert_kiln_ok(kiln_trainer_epoch(trainer, ds, &s));
  assert_allclose(&s.train_accuracy, &want_acc, 1, 0, 0);

  const int64_t xs[] = {N, 3};
  kiln_tensor *xt = kiln_test_tensor_f32(ctx, x, xs, 2, dev), *classes = NULL;
  assert_kiln_ok(kiln_model_predict(model, xt, KILN_PREDICT_CLASSES, &classes));
  double got[N], want[N];
  kiln_test_read_f64(classes, got, N);
  for (int r = 0; r < N; ++r) want[r] = (double)first[r];
  assert_allclose(got, want, N, 0, 0);
  kiln_tensor_release(classes);
  kiln_tensor_release(xt);
  kiln_trainer_release(trainer);
  kiln_dataset_release(ds);
  kiln_model_release(model);
}

/* Cross-entropy loss and accuracy of linear(3,5);relu;dropout;linear(5,4)
 * without dropout, in float64 on the host: the reference for evaluate. */
static void host_evaluate(kiln_model *model, const float *x, const int64_t *y, int n, double *loss, double *acc) {
  double w1[5 * 3], b1[5], w2[4 * 5], b2[4];
  double *params[4] = {w1, b1, w2, b2};
  const int64_t sizes[4] = {15, 5, 20, 4};
  for (int64_t i = 0; i < 4; ++i) {
    kiln_tensor *p = NULL;
    assert_kiln_ok(kiln_model_parameter(model, i, &p));
    kiln_test_read_f64(p, params[i], sizes[i]);
    kiln_tensor_release(p);
  }
  int correct = 0;
  *loss = 0;
  for (int r = 0; r < n; ++r) {
    double h[5], z[4];
    for (int j = 0; j < 5; ++j) {
      h[j] = b1[j];
      for (int i = 0; i < 3; ++i) h[j] += w1[j * 3 + i] * x[r * 3 + i];
      h[j] = h[j] > 0 ? h[j] : 0;
    }
    int best = 0;
    double mx = -INFINITY, sum = 0;
    for (int c = 0; c < 4; ++c) {
      z[c] = b2[c];
      for (int j = 0; j < 5; ++j) z[c] += w2[c * 5 + j] * h[j];
      if (z[c] > mx) mx = z[c], best = c;
    }
    for (int c = 0; c < 4; ++c) sum += exp(z[c] - mx);
    *loss += (log(sum) + mx - z[y[r]]) / n;
    correct += best == y[r];
  }
  *acc = correct / (double)n;
}

/* Evaluation runs the model without dropout whatever mode fit left it in,
 * so it is deterministic, and it covers every sample: 10 samples in batches
 * of 4 end with a partial batch of 2 (and of 1 with batches of 3), which
 * must count exactly as the host's float64 reference says. */
static void test_evaluate_is_exact_and_deterministic(void **state) {
  kiln_context *ctx = *state;
  enum { N = 10 };
  kiln_test_rng rng = kiln_test_rng_make(31);
  float x[N * 3];
  int64_t y[N];
  kiln_test_fill_uniform_f32(&rng, x, N * 3, -2, 2);
  for (int i = 0; i < N; ++i) y[i] = kiln_test_rng_below(&rng, 4);
  kiln_dataset *ds = kiln_test_dataset(ctx, x, y, N, 3, dev);
  kiln_model *model = make_model(ctx, "linear(3,5);relu;dropout(0.5);linear(5,4)", KILN_F64);
  kiln_trainer *trainer = make_trainer(model, KILN_OPTIM_SGD, 0.1, 4, 2, 0);
  kiln_history *h = NULL;
  assert_kiln_ok(kiln_trainer_fit(trainer, ds, NULL, 2, NULL, NULL, &h));
  kiln_history_release(h);
  int training = 0;
  assert_kiln_ok(kiln_model_is_training(model, &training));
  assert_int_equal(training, 1); /* fit leaves the model in training mode */

  double want_loss = 0, want_acc = 0;
  host_evaluate(model, x, y, N, &want_loss, &want_acc);
  /* f64 models agree with the host to rounding; the f32 model of the CUDA
   * run to f32's (a dropped unit would move the loss by O(0.1)). */
  const double rtol = gpu_run ? 1e-5 : 1e-12;
  for (int k = 0; k < 4; ++k) {
    const int64_t batch = (int64_t[]){4, 3, 10, 16}[k];
    kiln_trainer *t = k == 0 ? trainer : make_trainer(model, KILN_OPTIM_SGD, 0.1, batch, 2, 0);
    for (int mode = 0; mode < 3; ++mode) {
      /* As fit left it, in evaluation mode, back in training mode. */
      if (mode > 0) assert_kiln_ok(kiln_model_set_training(model, mode == 2));
      double loss = 0, acc = 0;
      assert_kiln_ok(kiln_trainer_evaluate(t, ds, &loss, &acc));
      assert_allclose(&loss, &want_loss, 1, rtol, 0);
      assert_allclose(&acc, &want_acc, 1, 0, 0);
    }
    if (t != trainer) kiln_trainer_release(t);
  }
  kiln_trainer_release(trainer);
  kiln_model_release(model);
  kiln_dataset_release(ds);
}

/* The sample order of each epoch, read from the progress reports: with lr 0
 * the model stays y = x + 0.5, so sample i (x = i, target 0) has the MSE loss
 * (i + 0.5)^2, and the running mean after batch k of 1 sample names the k-th
 * sample. */
enum { ORDER_N = 12, ORDER_EPOCHS = 3 };

typedef struct {
  double means[ORDER_EPOCHS][ORDER_N];
} order_log;

static int log_running_mean(void *user, const kiln_progress *p) {
  order_log *log = user;
  /* Batch reports after batches 1 .. N-1, then the epoch's mean over all N. */
  const int64_t k = p->phase == KILN_PROGRESS_BATCH ? p->batch : ORDER_N;
  assert_true(p->epoch >= 1 && p->epoch <= ORDER_EPOCHS && k >= 1 && k <= ORDER_N);
  log->means[p->epoch - 1][k - 1] = p->loss;
  return 0;
}

static int move_model_to_cpu(void *user, const kiln_progress *p) {
  (void)p;
  const kiln_device cpu = {KILN_DEVICE_CPU, -1};
  assert_kiln_ok(kiln_model_to(user, cpu));
  return 0;
}

/* A progress callback that moves the model being trained to another device
 * ends the fit with INVALID_ARGUMENT after it returns (the steps would
 * otherwise go on updating the storage the model left), and the model is
 * usable where it went. Needs a second device: the CUDA run alone. */
static void test_model_moved_by_callback(void **state) {
  if (!gpu_run) skip();
  kiln_context *ctx = *state;
  kiln_model *model = make_model(ctx, "4-8-3", KILN_F32);
  float x[32 * 4];
  int64_t y[32];
  for (int i = 0; i < 32 * 4; ++i) x[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
  for (int i = 0; i < 32; ++i) y[i] = i % 3;
  kiln_dataset *ds = kiln_test_dataset(ctx, x, y, 32, 4, dev);
  kiln_trainer_options *o = NULL;
  kiln_trainer *trainer = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_batch_size(o, 8));
  assert_kiln_ok(kiln_trainer_options_set_progress_interval(o, 1));
  assert_kiln_ok(kiln_trainer_create(model, o, &trainer));
  kiln_trainer_options_release(o);
  kiln_history *h = NULL;
  assert_status(kiln_trainer_fit(trainer, ds, NULL, 2, move_model_to_cpu, model, &h), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("model moved to cpu after the trainer was created on cuda:0");
  assert_null(h);
  kiln_device where = dev;
  assert_kiln_ok(kiln_model_device(model, &where));
  assert_int_equal(where.kind, KILN_DEVICE_CPU);
  int64_t steps = 0;
  assert_kiln_ok(kiln_trainer_steps_done(trainer, &steps));
  assert_int_equal(steps, 1); /* the batch before the report */
  kiln_trainer_release(trainer);
  kiln_dataset_release(ds);
  kiln_model_release(model);
}

static void epoch_orders(kiln_context *ctx, uint64_t shuffle_seed, int64_t orders[ORDER_EPOCHS][ORDER_N]) {
  kiln_model *model = make_model(ctx, "linear(1,1)", KILN_F64);
  const double one = 1, half = 0.5;
  kiln_tensor *w = NULL, *b = NULL;
  assert_kiln_ok(kiln_model_parameter(model, 0, &w));
  assert_kiln_ok(kiln_model_parameter(model, 1, &b));
  kiln_test_write_f64(w, &one, 1);
  kiln_test_write_f64(b, &half, 1);
  kiln_tensor_release(w);
  kiln_tensor_release(b);
  double x[ORDER_N], t[ORDER_N] = {0};
  for (int i = 0; i < ORDER_N; ++i) x[i] = i;
  const int64_t shape[] = {ORDER_N, 1};
  kiln_tensor *xt = kiln_test_tensor_f64(ctx, x, shape, 2, dev), *tt = kiln_test_tensor_f64(ctx, t, shape, 2, dev);
  kiln_dataset *ds = NULL;
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, xt, tt, &ds));
  kiln_trainer_options *o = NULL;
  kiln_trainer *trainer = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_loss(o, KILN_LOSS_MSE));
  assert_kiln_ok(kiln_trainer_options_set_lr(o, 0));
  assert_kiln_ok(kiln_trainer_options_set_batch_size(o, 1));
  assert_kiln_ok(kiln_trainer_options_set_shuffle_seed(o, shuffle_seed));
  assert_kiln_ok(kiln_trainer_options_set_progress_interval(o, 1));
  assert_kiln_ok(kiln_trainer_create(model, o, &trainer));
  kiln_trainer_options_release(o);
  order_log log;
  memset(&log, 0, sizeof log);
  kiln_history *h = NULL;
  assert_kiln_ok(kiln_trainer_fit(trainer, ds, NULL, ORDER_EPOCHS, log_running_mean, &log, &h));
  kiln_history_release(h);
  for (int e = 0; e < ORDER_EPOCHS; ++e) {
    int seen[ORDER_N] = {0};
    for (int k = 0; k < ORDER_N; ++k) {
      const double loss = (k + 1) * log.means[e][k] - k * (k ? log.means[e][k - 1] : 0);
      const double i = sqrt(loss) - 0.5; /* exact to ~1e-9 here */
      const int64_t sample = llround(i);
      if (fabs(i - (double)sample) > 1e-3 || sample < 0 || sample >= ORDER_N)
        fail_msg("epoch %d, position %d: loss %.12g is no sample's", e + 1, k, loss);
      orders[e][k] = sample;
      ++seen[sample];
    }
    for (int i = 0; i < ORDER_N; ++i)
      if (seen[i] != 1) fail_msg("epoch %d visits sample %d %d times, not once", e + 1, i, seen[i]);
  }
  kiln_trainer_release(trainer);
  kiln_dataset_release(ds);
  kiln_tensor_release(xt);
  kiln_tensor_release(tt);
  kiln_model_release(model);
}

/* Each epoch visits every sample once, in an order of its own drawn from
 * the shuffle seed: epochs differ from each other and from the data order,
 * the same seed repeats them, another seed changes them. */
static void test_epochs_draw_new_orders(void **state) {
  kiln_context *ctx = *state;
  int64_t a[ORDER_EPOCHS][ORDER_N], b[ORDER_EPOCHS][ORDER_N], c[ORDER_EPOCHS][ORDER_N], identity[ORDER_N];
  for (int i = 0; i < ORDER_N; ++i) identity[i] = i;
  epoch_orders(ctx, 5, a);
  epoch_orders(ctx, 5, b);
  epoch_orders(ctx, 6, c);
  assert_memory_equal(a, b, sizeof a);
  for (int e = 0; e < ORDER_EPOCHS; ++e) {
    assert_memory_not_equal(a[e], identity, sizeof identity);
    assert_memory_not_equal(a[e], c[e], sizeof identity);
    for (int f = e + 1; f < ORDER_EPOCHS; ++f) assert_memory_not_equal(a[e], a[f], sizeof identity);
  }
}

/* ---- errors -------------------------------------------------------------------- */

static void test_step_errors(void **state) {
  kiln_context *ctx = *state;
  kiln_model *model = make_model(ctx, "4-3", KILN_F32);
  kiln_trainer *trainer = make_trainer(model, KILN_OPTIM_SGD, 0.1, 8, 1, 0);
  float xv[2 * 4] = {0};
  const int64_t xs[] = {2, 4}, bad_xs[] = {2, 5}, ys[] = {2}, ys3[] = {3};
  kiln_tensor *x = kiln_test_tensor_f32(ctx, xv, xs, 2, dev), *xbad = NULL, *y = NULL;
  assert_kiln_ok(kiln_tensor_zeros(ctx, bad_xs, 2, KILN_F32, dev, &xbad));
  int64_t labels[2] = {1, 2};
  assert_kiln_ok(kiln_tensor_from_host(ctx, labels, sizeof labels, ys, 1, KILN_I64, dev, &y));
  double loss = 5;
  assert_status(kiln_trainer_step(trainer, xbad, y, &loss), KILN_ERROR_SHAPE_MISMATCH);
  assert_true(loss == 0);
  assert_last_error_contains("[2, 5]");
  /* Labels of another dtype are converted; floats are refused. */
  int32_t l32[2] = {0, 2};
  kiln_tensor *y32 = NULL, *yf = NULL, *y3 = NULL, *ybig = NULL;
  assert_kiln_ok(kiln_tensor_from_host(ctx, l32, sizeof l32, ys, 1, KILN_I32, dev, &y32));
  assert_kiln_ok(kiln_trainer_step(trainer, x, y32, &loss));
  assert_true(isfinite(loss) && loss > 0);
  assert_kiln_ok(kiln_tensor_zeros(ctx, ys, 1, KILN_F32, dev, &yf));
  assert_status(kiln_trainer_step(trainer, x, yf, &loss), KILN_ERROR_DTYPE_MISMATCH);
  assert_kiln_ok(kiln_tensor_zeros(ctx, ys3, 1, KILN_I64, dev, &y3));
  assert_status(kiln_trainer_step(trainer, x, y3, &loss), KILN_ERROR_SHAPE_MISMATCH);
  /* Labels on the host are checked before the step, whatever the model's
   * device: refused, naming the label, and nothing is updated. */
  int64_t big[2] = {0, 3};
  const kiln_device host = {KILN_DEVICE_CPU, -1};
  kiln_tensor *ybig_host = NULL;
  assert_kiln_ok(kiln_tensor_from_host(ctx, big, sizeof big, ys, 1, KILN_I64, host, &ybig_host));
  assert_status(kiln_trainer_step(trainer, x, ybig_host, &loss), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("label 3");
  assert_status(kiln_trainer_step(trainer, x, ybig_host, NULL), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(ybig_host);
  int64_t steps = 0;
  assert_kiln_ok(kiln_trainer_steps_done(trainer, &steps));
  assert_int_equal(steps, 1);
  assert_kiln_ok(kiln_tensor_from_host(ctx, big, sizeof big, ys, 1, KILN_I64, dev, &ybig));
  if (gpu_run) {
    /* Labels already on the GPU are counted by the loss kernel instead (no
     * host check, no wait): the step reports them when its loss is read. */
    assert_status(kiln_trainer_step(trainer, x, ybig, &loss), KILN_ERROR_INVALID_ARGUMENT);
    assert_last_error_contains("labels outside [0, 3)");
    assert_kiln_ok(kiln_trainer_steps_done(trainer, &steps));
    assert_int_equal(steps, 2); /* applied, as the message says */
  }
  assert_status(kiln_trainer_step(trainer, NULL, y, &loss), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_step(NULL, x, y, &loss), KILN_ERROR_INVALID_ARGUMENT);

  /* A dataset of another width, or with more classes than outputs. */
  kiln_dataset *ds = NULL;
  kiln_epoch_stats s = {sizeof s};
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, xbad, y, &ds));
  assert_status(kiln_trainer_epoch(trainer, ds, &s), KILN_ERROR_SHAPE_MISMATCH);
  assert_int_equal(s.struct_size, sizeof s);
  kiln_dataset_release(ds);
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, x, ybig, &ds));
  assert_status(kiln_trainer_epoch(trainer, ds, &s), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("labels up to 3");
  kiln_history *h = NULL;
  assert_status(kiln_trainer_fit(trainer, ds, NULL, 0, NULL, NULL, &h), KILN_ERROR_INVALID_ARGUMENT);
  kiln_dataset_release(ds);
  /* Float targets for the cross-entropy loss: the status of the step's
   * float labels, from every call that takes a dataset. */
  const int64_t ts[] = {2, 3};
  kiln_tensor *targets = NULL;
  assert_kiln_ok(kiln_tensor_zeros(ctx, ts, 2, KILN_F32, dev, &targets));
  assert_kiln_ok(kiln_dataset_from_tensors(ctx, x, targets, &ds));
  assert_status(kiln_trainer_epoch(trainer, ds, &s), KILN_ERROR_DTYPE_MISMATCH);
  assert_last_error_contains("needs class labels");
  assert_status(kiln_trainer_fit(trainer, ds, NULL, 1, NULL, NULL, &h), KILN_ERROR_DTYPE_MISMATCH);
  assert_null(h);
  double eval_loss = 1;
  assert_status(kiln_trainer_evaluate(trainer, ds, &eval_loss, NULL), KILN_ERROR_DTYPE_MISMATCH);
  kiln_dataset_release(ds);
  kiln_tensor_release(targets);

  /* Bad options. */
  kiln_trainer_options *o = NULL;
  kiln_trainer *t2 = (kiln_trainer *)(uintptr_t)1;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_status(kiln_trainer_options_set_lr(o, -1), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_lr(o, NAN), KILN_ERROR_INVALID_ARGUMENT);
  /* Ranges without an upper bound still hold finite values only. */
  assert_status(kiln_trainer_options_set_lr(o, INFINITY), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_grad_clip(o, INFINITY), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_batch_size(o, 0), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("batch_size must be >= 1, got 0"); /* the range of options_table.h */
  assert_status(kiln_trainer_options_set_betas(o, 0.9, 1.0), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("beta2 must be in [0, 1), got 1");
  assert_status(kiln_trainer_options_set_eps(o, 0), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("eps must be > 0, got 0");
  assert_status(kiln_trainer_options_set_optimizer(o, (kiln_optimizer_kind)3), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("optimizer must be one of sgd, adam, adamw, got 3");
  assert_status(kiln_trainer_options_set_fast_path(o, KILN_FAST_PATH_ALL + 1), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_bucket_bytes(o, -1), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_precision(o, (kiln_precision)3), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_loss(o, (kiln_loss_kind)3), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_grad_clip(o, -1), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_trainer_options_set_progress_interval(o, -1), KILN_ERROR_INVALID_ARGUMENT);
  assert_kiln_ok(kiln_trainer_options_set_nesterov(o, 1));
  assert_status(kiln_trainer_create(model, o, &t2), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(t2);
  assert_last_error_contains("nesterov");
  kiln_trainer_options_release(o);
  assert_status(kiln_trainer_create(NULL, NULL, &t2), KILN_ERROR_INVALID_ARGUMENT);

  /* A released trainer. */
  kiln_trainer_release(trainer);
  assert_status(kiln_trainer_step(trainer, x, y, &loss), KILN_ERROR_INVALID_HANDLE);
  kiln_trainer_release(trainer);
  kiln_tensor_release(x);
  kiln_tensor_release(xbad);
  kiln_tensor_release(y);
  kiln_tensor_release(y32);
  kiln_tensor_release(yf);
  kiln_tensor_release(y3);
  kiln_tensor_release(ybig);
  kiln_model_release(model);
}

/* kiln_loss against closed forms. */
static void test_loss_values(void **state) {
  kiln_context *ctx = *state;
  const double logits[6] = {1, 2, 3, -1, 0, 1};
  const int64_t ls[] = {2, 3}, ys[] = {2};
  kiln_tensor *p = kiln_test_tensor_f64(ctx, logits, ls, 2, dev), *y = NULL, *t = NULL;
  uint8_t labels[2] = {0, 2};
  assert_kiln_ok(kiln_tensor_from_host(ctx, labels, sizeof labels, ys, 1, KILN_U8, dev, &y));
  double got = 0, want = 0;
  assert_kiln_ok(kiln_loss(KILN_LOSS_CROSS_ENTROPY, p, y, &got));
  for (int r = 0; r < 2; ++r) {
    double z = 0;
    for (int j = 0; j < 3; ++j) z += exp(logits[r * 3 + j]);
    want += (log(z) - logits[r * 3 + labels[r]]) / 2;
  }
  assert_allclose(&got, &want, 1, 1e-12, 0);
  const double target[6] = {0, 1, 1, 0.5, 0, 1};
  t = kiln_test_tensor_f64(ctx, target, ls, 2, dev);
  assert_kiln_ok(kiln_loss(KILN_LOSS_MSE, p, t, &got));
  want = 0;
  for (int i = 0; i < 6; ++i) want += (logits[i] - target[i]) * (logits[i] - target[i]) / 6;
  assert_allclose(&got, &want, 1, 1e-12, 0);
  assert_kiln_ok(kiln_loss(KILN_LOSS_BCE_WITH_LOGITS, p, t, &got));
  want = 0;
  for (int i = 0; i < 6; ++i) {
    const double s = 1 / (1 + exp(-logits[i]));
    want -= (target[i] * log(s) + (1 - target[i]) * log(1 - s)) / 6;
  }
  assert_allclose(&got, &want, 1, 1e-12, 0);
  assert_status(kiln_loss(KILN_LOSS_MSE, p, y, &got), KILN_ERROR_DTYPE_MISMATCH);
  assert_status(kiln_loss(KILN_LOSS_CROSS_ENTROPY, p, t, &got), KILN_ERROR_DTYPE_MISMATCH);
  assert_status(kiln_loss((kiln_loss_kind)7, p, t, &got), KILN_ERROR_INVALID_ARGUMENT);
  labels[1] = 3;
  kiln_tensor *bad = NULL;
  assert_kiln_ok(kiln_tensor_from_host(ctx, labels, sizeof labels, ys, 1, KILN_U8, dev, &bad));
  assert_status(kiln_loss(KILN_LOSS_CROSS_ENTROPY, p, bad, &got), KILN_ERROR_INVALID_ARGUMENT);
  kiln_tensor_release(bad);
  kiln_tensor_release(p);
  kiln_tensor_release(y);
  kiln_tensor_release(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_optimizers_match_torch),
      cmocka_unit_test(test_epoch_steps_follow_adam_and_schedule),
      cmocka_unit_test(test_label_smoothing),
      cmocka_unit_test(test_grad_clipping),
      cmocka_unit_test(test_schedules),
      cmocka_unit_test(test_convergence_and_history),
      cmocka_unit_test(test_determinism),
      cmocka_unit_test(test_output_transform_training),
      cmocka_unit_test(test_progress_and_cancel),
      cmocka_unit_test(test_epoch_pull_form),
      cmocka_unit_test(test_tied_logits_count_the_first_maximum),
      cmocka_unit_test(test_evaluate_is_exact_and_deterministic),
      cmocka_unit_test(test_epochs_draw_new_orders),
      cmocka_unit_test(test_step_errors),
      cmocka_unit_test(test_loss_values),
      cmocka_unit_test(test_model_moved_by_callback),
  };
  return cmocka_run_group_tests(tests, setup, kiln_test_context_teardown);
}
