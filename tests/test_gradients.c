/* Backward passes against central finite differences, in float64 on the CPU.
 *
 * The analytic gradient comes from one trainer step with plain SGD at lr = 1
 * (grad = params_before - params_after); the numerical one from
 * kiln_loss(kiln_model_forward(x), y) with each parameter moved by +-h
 * through the parameter views. Covered: Linear with and without bias, every
 * activation both fused after a Linear and on its own, Dropout (eval mode
 * identity, training mode mask scaling), a LogSoftmax output transform, and
 * the three losses.
 *
 * The GPU half (test_gradients_cuda, KILN_TEST_DEVICE=cuda) runs the same
 * cases on cuda:0 with f32 models (f64 models are CPU-only, and f32 is too
 * coarse for finite differences): the CUDA step's gradient must equal the
 * CPU's float64 analytic gradient at the same (f32-rounded) parameters. */
#include "support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};

enum { BATCH = 5 };

typedef struct {
  const char *spec;
  kiln_loss_kind loss;
  int eval_mode; /* run the step and the differences in evaluation mode */
} grad_case;

static kiln_model *make_model_on(kiln_context *ctx, const char *text, kiln_device dev, kiln_dtype dtype) {
  return kiln_test_model_on(ctx, text, dev, dtype);
}

static kiln_model *make_model(kiln_context *ctx, const char *text) { return make_model_on(ctx, text, cpu, KILN_F64); }

static int64_t count_params(kiln_model *model, int64_t *tensors) {
  int64_t n = 0;
  assert_kiln_ok(kiln_model_num_parameters(model, &n));
  assert_kiln_ok(kiln_model_num_parameter_tensors(model, tensors));
  return n;
}

/* One SGD step at lr = 1: grad = params before - params after. */
static void step_gradient(kiln_model *model, kiln_loss_kind loss, const kiln_tensor *x, const kiln_tensor *y,
                          const double *before, double *grad, double *step_loss) {
  kiln_trainer_options *opts = NULL;
  kiln_trainer *trainer = NULL;
  int64_t tensors = 0;
  const int64_t n = count_params(model, &tensors);
  double *after = malloc((size_t)n * sizeof *after);
  assert_kiln_ok(kiln_trainer_options_create(&opts));
  assert_kiln_ok(kiln_trainer_options_set_loss(opts, loss));
  assert_kiln_ok(kiln_trainer_options_set_lr(opts, 1.0));
  assert_kiln_ok(kiln_trainer_create(model, opts, &trainer));
  assert_kiln_ok(kiln_trainer_step(trainer, x, y, step_loss));
  assert_int_equal(kiln_test_read_params(model, after, n), n);
  for (int64_t i = 0; i < n; ++i) grad[i] = before[i] - after[i];
  kiln_trainer_release(trainer);
  kiln_trainer_options_release(opts);
  free(after);
}

static double loss_of(kiln_model *model, kiln_loss_kind kind, const kiln_tensor *x, const kiln_tensor *y) {
  kiln_tensor *pred = NULL;
  double loss = 0;
  assert_kiln_ok(kiln_model_forward(model, x, &pred));
  assert_kiln_ok(kiln_loss(kind, pred, y, &loss));
  kiln_tensor_release(pred);
  return loss;
}

static void check_case(kiln_context *ctx, const grad_case *c) {
  kiln_model *model = make_model(ctx, c->spec);
  if (c->eval_mode) assert_kiln_ok(kiln_model_set_training(model, 0));
  int64_t in = 0, out = 0, tensors = 0;
  assert_kiln_ok(kiln_model_input_size(model, &in));
  assert_kiln_ok(kiln_model_output_size(model, &out));
  const int64_t n = count_params(model, &tensors);

  kiln_test_rng rng = kiln_test_rng_make(99);
  double *xv = malloc((size_t)(BATCH * in) * sizeof *xv);
  kiln_test_fill_uniform_f64(&rng, xv, BATCH * in, -2, 2);
  const int64_t xshape[] = {BATCH, in};
  kiln_tensor *x = kiln_test_tensor_f64(ctx, xv, xshape, 2, cpu), *y = NULL;
  if (c->loss == KILN_LOSS_CROSS_ENTROPY) {
    int64_t labels[BATCH];
    for (int i = 0; i < BATCH; ++i) labels[i] = kiln_test_rng_below(&rng, out);
    const int64_t yshape[] = {BATCH};
    assert_kiln_ok(kiln_tensor_from_host(ctx, labels, sizeof labels, yshape, 1, KILN_I64, cpu, &y));
  } else {
    double *t = malloc((size_t)(BATCH * out) * sizeof *t);
    for (int64_t i = 0; i < BATCH * out; ++i)
      t[i] = c->loss == KILN_LOSS_MSE ? kiln_test_rng_normal(&rng) : kiln_test_rng_uniform(&rng, 0, 1);
    const int64_t yshape[] = {BATCH, out};
    y = kiln_test_tensor_f64(ctx, t, yshape, 2, cpu);
    free(t);
  }

  double *before = malloc((size_t)n * sizeof *before);
  double *analytic = malloc((size_t)n * sizeof *analytic), *numeric = malloc((size_t)n * sizeof *numeric);
  assert_int_equal(kiln_test_read_params(model, before, n), n);
  /* The GPU half compares an f32 model against this one: both start from the
   * same f32-rounded parameters. */
  for (int64_t i = 0; i < n; ++i) before[i] = (float)before[i];
  kiln_test_write_params(model, before, n);
  const double loss0 = loss_of(model, c->loss, x, y);

  double step_loss = 0;
  step_gradient(model, c->loss, x, y, before, analytic, &step_loss);
  assert_allclose(&step_loss, &loss0, 1, 1e-12, 0); /* the loss before the update */

  if (kiln_test_cuda_run()) {
    /* The same step on cuda:0 in f32. Tolerances: parameters and gradients
     * are O(1) here and the nets at most 6 wide, so f32 rounding in the
     * forward and backward stays near 1e-6 relative; grad = before - after is
     * exact up to one f32 rounding of the updated parameter (<= 6e-8 for
     * |p| < 1). rtol 1e-4 / atol 1e-6 leaves a wide margin and is still far
     * below any real error (a wrong term is O(grad)). */
    kiln_device gpu = kiln_test_device(ctx);
    kiln_model *gm = make_model_on(ctx, c->spec, gpu, KILN_F32);
    if (c->eval_mode) assert_kiln_ok(kiln_model_set_training(gm, 0));
    kiln_test_write_params(gm, before, n);
    double *gpu_grad = malloc((size_t)n * sizeof *gpu_grad);
    double gpu_loss = 0;
    step_gradient(gm, c->loss, x, y, before, gpu_grad, &gpu_loss);
    print_message("cuda %-55s %lld parameters\n", c->spec, (long long)n);
    assert_allclose(&gpu_loss, &loss0, 1, 1e-5, 1e-6);
    assert_allclose(gpu_grad, analytic, n, 1e-4, 1e-6);
    free(gpu_grad);
    kiln_model_release(gm);
    kiln_tensor_release(x);
    kiln_tensor_release(y);
    kiln_model_release(model);
    free(xv);
    free(before);
    free(analytic);
    free(numeric);
    return;
  }

  const double h = 1e-6;
  kiln_test_write_params(model, before, n);
  for (int64_t i = 0; i < n; ++i) {
    const double p = before[i];
    before[i] = p + h;
    kiln_test_write_params(model, before, n);
    const double up = loss_of(model, c->loss, x, y);
    before[i] = p - h;
    kiln_test_write_params(model, before, n);
    const double down = loss_of(model, c->loss, x, y);
    before[i] = p;
    numeric[i] = (up - down) / (2 * h);
  }
  print_message("%-60s %-16s %lld parameters\n", c->spec, c->loss == KILN_LOSS_CROSS_ENTROPY ? "cross-entropy"
                                                         : c->loss == KILN_LOSS_MSE         ? "mse"
                                                                                            : "bce-with-logits",
                (long long)n);
  assert_allclose(analytic, numeric, n, 1e-6, 1e-9);

  kiln_tensor_release(x);
  kiln_tensor_release(y);
  kiln_model_release(model);
  free(xv);
  free(before);
  free(analytic);
  free(numeric);
}

static void test_layers_with_cross_entropy(void **state) {
  kiln_context *ctx = *state;
  static const grad_case cases[] = {
      {"linear(4,3)", KILN_LOSS_CROSS_ENTROPY, 0},
      {"linear(4,6,nobias);relu;linear(6,3)", KILN_LOSS_CROSS_ENTROPY, 0},
      {"linear(4,6);leaky_relu(0.1);linear(6,3,nobias)", KILN_LOSS_CROSS_ENTROPY, 0},
      {"linear(4,6);gelu;linear(6,5);gelu;linear(5,3)", KILN_LOSS_CROSS_ENTROPY, 0},
      {"linear(4,6);tanh;linear(6,3)", KILN_LOSS_CROSS_ENTROPY, 0},
      {"linear(4,6);sigmoid;linear(6,3)", KILN_LOSS_CROSS_ENTROPY, 0},
      /* Activations that are stages of their own (not fused into a Linear). */
      {"linear(4,6);dropout(0);gelu;linear(6,3)", KILN_LOSS_CROSS_ENTROPY, 0},
      {"linear(4,6);tanh;sigmoid;leaky_relu(0.2);relu;linear(6,3)", KILN_LOSS_CROSS_ENTROPY, 0},
      {"tanh;linear(4,6);relu;linear(6,3)", KILN_LOSS_CROSS_ENTROPY, 0},
      /* ELU, SELU and Softplus, fused and alone, with PyTorch's parameters
       * and others (Softplus's threshold inside the pre-activations' range). */
      {"linear(4,6);elu;linear(6,3)", KILN_LOSS_CROSS_ENTROPY, 0},
      {"linear(4,6);elu(-0.7);linear(6,3)", KILN_LOSS_CROSS_ENTROPY, 0},
      {"linear(4,6);selu;linear(6,5);selu;linear(5,3)", KILN_LOSS_CROSS_ENTROPY, 0},
      {"linear(4,6);softplus;linear(6,3)", KILN_LOSS_CROSS_ENTROPY, 0},
      {"linear(4,6);softplus(2.5,0.4);linear(6,3)", KILN_LOSS_CROSS_ENTROPY, 0},
      {"linear(4,6);dropout(0);elu(0.5);selu;softplus(0.5,0.1);linear(6,3)", KILN_LOSS_CROSS_ENTROPY, 0},
      /* A LogSoftmax output transform: the trainer takes cross-entropy of the
       * logits under it, which is the cross-entropy of its output, log
       * softmax being softmax's own logits: the same gradient. */
      {"linear(4,6);relu;linear(6,3);log_softmax", KILN_LOSS_CROSS_ENTROPY, 0},
      /* Dropout in evaluation mode is the identity, forward and backward. */
      {"linear(4,6);relu;dropout(0.5);linear(6,3)", KILN_LOSS_CROSS_ENTROPY, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) check_case(ctx, &cases[i]);
}

static void test_regression_losses(void **state) {
  kiln_context *ctx = *state;
  static const grad_case cases[] = {
      {"linear(4,6);tanh;linear(6,3)", KILN_LOSS_MSE, 0},
      {"linear(4,6);gelu;linear(6,1)", KILN_LOSS_MSE, 0},
      {"linear(4,6);relu;linear(6,3)", KILN_LOSS_BCE_WITH_LOGITS, 0},
      {"linear(4,6);sigmoid;linear(6,2,nobias)", KILN_LOSS_BCE_WITH_LOGITS, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) check_case(ctx, &cases[i]);
}

/* Training-mode Dropout: every output is 0 or the eval output / (1 - p),
 * about p of them 0, the mask new on each call; eval mode is the identity
 * (the plain Linear computed here). */
static void test_dropout_scaling(void **state) {
  kiln_context *ctx = *state;
  const double p = 0.3;
  /* On the CPU an f64 model; on CUDA an f32 one, checked at f32's rounding
   * (6 products of O(1) terms: 1e-6 relative is ~10 ulp). */
  const int gpu = kiln_test_cuda_run();
  const kiln_device dev = kiln_test_device(ctx);
  const double rtol = gpu ? 1e-6 : 1e-12, atol = gpu ? 1e-7 : 1e-14;
  kiln_model *model = make_model_on(ctx, "linear(6,50);dropout(0.3)", dev, gpu ? KILN_F32 : KILN_F64);
  kiln_test_rng rng = kiln_test_rng_make(5);
  double xv[8 * 6], w[50 * 6], b[50], want[8 * 50];
  kiln_test_fill_uniform_f64(&rng, xv, 48, -1, 1);
  for (int i = 0; i < 48; ++i) xv[i] = (float)xv[i]; /* exact in both dtypes */
  const int64_t shape[] = {8, 6};
  kiln_tensor *x = kiln_test_tensor_f64(ctx, xv, shape, 2, dev);
  kiln_tensor *wt = NULL, *bt = NULL;
  assert_kiln_ok(kiln_model_parameter(model, 0, &wt));
  assert_kiln_ok(kiln_model_parameter(model, 1, &bt));
  kiln_test_read_f64(wt, w, 300);
  kiln_test_read_f64(bt, b, 50);
  for (int r = 0; r < 8; ++r)
    for (int o = 0; o < 50; ++o) {
      double s = b[o];
      for (int i = 0; i < 6; ++i) s += xv[r * 6 + i] * w[o * 6 + i];
      want[r * 50 + o] = s;
    }

  double y1[400], y2[400];
  kiln_tensor *t1 = NULL, *t2 = NULL;
  assert_kiln_ok(kiln_model_forward(model, x, &t1));
  assert_kiln_ok(kiln_model_forward(model, x, &t2));
  kiln_test_read_f64(t1, y1, 400);
  kiln_test_read_f64(t2, y2, 400);
  int zeros = 0;
  for (int i = 0; i < 400; ++i) {
    if (y1[i] == 0) {
      ++zeros;
    } else {
      double scaled = want[i] / (1 - p);
      assert_allclose(&y1[i], &scaled, 1, rtol, atol);
    }
  }
  assert_true(fabs(zeros / 400.0 - p) < 0.1);
  assert_true(memcmp(y1, y2, sizeof y1) != 0);
  kiln_tensor_release(t1);
  kiln_tensor_release(t2);

  assert_kiln_ok(kiln_model_set_training(model, 0));
  assert_kiln_ok(kiln_model_forward(model, x, &t1));
  assert_tensor_close(t1, want, 400, rtol, atol);
  kiln_tensor_release(t1);
  kiln_tensor_release(wt);
  kiln_tensor_release(bt);
  kiln_tensor_release(x);
  kiln_model_release(model);
}

/* Training-mode Dropout's backward through one SGD step (lr 1, batch 1,
 * MSE) of linear(4,16);relu;dropout(0.5);linear(16,1), against the closed
 * form: with d = dL/dpred = 2 (pred - t), the step moves b2 by -d, W2[j] by
 * -d m_j h_j and W1[j][i] by -d W2[j] m_j relu'(z_j) x_i, where h = relu(z),
 * z = W1 x + b1, and m_j is the mask times 1 / (1 - p): 0 or 2. d and the
 * mask are read back from the step's own changes to b2 and W2 (each m_j must
 * come out 0 or 2), so the first layer's change checks the backward's
 * scaling alone. */
static void test_dropout_backward(void **state) {
  kiln_context *ctx = *state;
  enum { IN = 4, HID = 16 };
  const double p = 0.5, scale = 1 / (1 - p);
  const int gpu = kiln_test_cuda_run();
  const kiln_device dev = kiln_test_device(ctx);
  /* f64 on the CPU; f32 on CUDA, whose products of O(1) terms hold ~1e-6. */
  const double rtol = gpu ? 1e-4 : 1e-10, atol = gpu ? 1e-6 : 1e-13;
  kiln_model *model =
      make_model_on(ctx, "linear(4,16);relu;dropout(0.5);linear(16,1)", dev, gpu ? KILN_F32 : KILN_F64);
  enum { NP = HID * IN + HID + HID + 1 };
  double before[NP];
  assert_int_equal(kiln_test_read_params(model, before, NP), NP);
  const double *w1 = before, *b1 = before + HID * IN, *w2 = b1 + HID;
  kiln_test_rng rng = kiln_test_rng_make(8);
  double x[IN], t = 3; /* a target far from the output: d is O(1) */
  kiln_test_fill_uniform_f64(&rng, x, IN, -1, 1);
  for (int i = 0; i < IN; ++i) x[i] = (float)x[i];
  const int64_t xs[] = {1, IN}, ts[] = {1, 1};
  kiln_tensor *xt = kiln_test_tensor_f64(ctx, x, xs, 2, dev), *tt = kiln_test_tensor_f64(ctx, &t, ts, 2, dev);
  double grad[NP], loss = 0;
  step_gradient(model, KILN_LOSS_MSE, xt, tt, before, grad, &loss);
  const double d = grad[NP - 1];
  assert_true(fabs(d) > 0.1);
  double z[HID], m[HID], want[NP];
  int kept = 0, dropped = 0;
  for (int j = 0; j < HID; ++j) {
    z[j] = b1[j];
    for (int i = 0; i < IN; ++i) z[j] += w1[j * IN + i] * x[i];
    const double h = z[j] > 0 ? z[j] : 0;
    if (h == 0) {
      m[j] = 0; /* an inactive unit: its mask is invisible and irrelevant */
      continue;
    }
    /* 0 or 1 / (1 - p), read back; where h is tiny, f32's rounding of the
     * step blurs the ratio, so only clear units check its value. */
    const double ratio = grad[HID * IN + HID + j] / (d * h), snapped = fabs(ratio) < scale / 2 ? 0 : scale;
    if (h > 0.05) assert_allclose(&ratio, &snapped, 1, rtol, 1e-9); /* the forward's scaling */
    m[j] = snapped;
    if (snapped == 0) ++dropped;
    else ++kept;
  }
  assert_true(kept >= 2 && dropped >= 2); /* both kinds of units are checked */
  for (int j = 0; j < HID; ++j) {
    for (int i = 0; i < IN; ++i) want[j * IN + i] = d * w2[j] * m[j] * (z[j] > 0) * x[i];
    want[HID * IN + j] = d * w2[j] * m[j] * (z[j] > 0);
  }
  assert_allclose(grad, want, HID * IN + HID, rtol, atol);
  kiln_tensor_release(xt);
  kiln_tensor_release(tt);
  kiln_model_release(model);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layers_with_cross_entropy),
      cmocka_unit_test(test_regression_losses),
      cmocka_unit_test(test_dropout_scaling),
      cmocka_unit_test(test_dropout_backward),
  };
  return cmocka_run_group_tests(tests, kiln_test_context_setup, kiln_test_context_teardown);
}
