/* Backward passes against central finite differences, in float64 on the CPU.
 *
 * The analytic gradient comes from one trainer step with plain SGD at lr = 1
 * (grad = params_before - params_after); the numerical one from
 * kiln_loss(kiln_model_forward(x), y) with each parameter moved by +-h
 * through the parameter views. Covered: Linear with and without bias, every
 * activation both fused after a Linear and on its own, Dropout (eval mode
 * identity, training mode mask scaling), and the three losses. */
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

static kiln_model *make_model(kiln_context *ctx, const char *text) {
  kiln_model_spec *spec = NULL;
  kiln_model *model = NULL;
  assert_kiln_ok(kiln_model_spec_create(&spec));
  assert_kiln_ok(kiln_model_spec_parse(spec, text));
  assert_kiln_ok(kiln_model_create_dtype(ctx, spec, cpu, KILN_F64, &model));
  kiln_model_spec_release(spec);
  return model;
}

static int64_t count_params(kiln_model *model, int64_t *tensors) {
  int64_t n = 0;
  assert_kiln_ok(kiln_model_num_parameters(model, &n));
  assert_kiln_ok(kiln_model_num_parameter_tensors(model, tensors));
  return n;
}

/* Reads (or, when write, writes) all parameters as one concatenated array. */
static void params_io(kiln_model *model, double *all, int write) {
  int64_t tensors = 0, at = 0;
  count_params(model, &tensors);
  for (int64_t i = 0; i < tensors; ++i) {
    kiln_tensor *p = NULL;
    int64_t n = 0;
    assert_kiln_ok(kiln_model_parameter(model, i, &p));
    assert_kiln_ok(kiln_tensor_numel(p, &n));
    if (write)
      assert_kiln_ok(kiln_tensor_copy_from_host(p, all + at, n * (int64_t)sizeof(double)));
    else
      assert_kiln_ok(kiln_tensor_copy_to_host(p, all + at, n * (int64_t)sizeof(double)));
    at += n;
    kiln_tensor_release(p);
  }
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

  double *before = malloc((size_t)n * sizeof *before), *after = malloc((size_t)n * sizeof *after);
  double *analytic = malloc((size_t)n * sizeof *analytic), *numeric = malloc((size_t)n * sizeof *numeric);
  params_io(model, before, 0);
  const double loss0 = loss_of(model, c->loss, x, y);

  kiln_trainer_options *opts = NULL;
  kiln_trainer *trainer = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&opts));
  assert_kiln_ok(kiln_trainer_options_set_loss(opts, c->loss));
  assert_kiln_ok(kiln_trainer_options_set_lr(opts, 1.0));
  assert_kiln_ok(kiln_trainer_create(model, opts, &trainer));
  double step_loss = 0;
  assert_kiln_ok(kiln_trainer_step(trainer, x, y, &step_loss));
  assert_allclose(&step_loss, &loss0, 1, 1e-12, 0); /* the loss before the update */
  params_io(model, after, 0);
  for (int64_t i = 0; i < n; ++i) analytic[i] = before[i] - after[i];

  const double h = 1e-6;
  params_io(model, before, 1);
  for (int64_t i = 0; i < n; ++i) {
    const double p = before[i];
    before[i] = p + h;
    params_io(model, before, 1);
    const double up = loss_of(model, c->loss, x, y);
    before[i] = p - h;
    params_io(model, before, 1);
    const double down = loss_of(model, c->loss, x, y);
    before[i] = p;
    numeric[i] = (up - down) / (2 * h);
  }
  print_message("%-60s %-16s %lld parameters\n", c->spec, c->loss == KILN_LOSS_CROSS_ENTROPY ? "cross-entropy"
                                                         : c->loss == KILN_LOSS_MSE         ? "mse"
                                                                                            : "bce-with-logits",
                (long long)n);
  assert_allclose(analytic, numeric, n, 1e-6, 1e-9);

  kiln_trainer_release(trainer);
  kiln_trainer_options_release(opts);
  kiln_tensor_release(x);
  kiln_tensor_release(y);
  kiln_model_release(model);
  free(xv);
  free(before);
  free(after);
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
  kiln_model *model = make_model(ctx, "linear(6,50);dropout(0.3)");
  kiln_test_rng rng = kiln_test_rng_make(5);
  double xv[8 * 6], w[50 * 6], b[50], want[8 * 50];
  kiln_test_fill_uniform_f64(&rng, xv, 48, -1, 1);
  const int64_t shape[] = {8, 6};
  kiln_tensor *x = kiln_test_tensor_f64(ctx, xv, shape, 2, cpu);
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
      assert_allclose(&y1[i], &scaled, 1, 1e-12, 0);
    }
  }
  assert_true(fabs(zeros / 400.0 - p) < 0.1);
  assert_true(memcmp(y1, y2, sizeof y1) != 0);
  kiln_tensor_release(t1);
  kiln_tensor_release(t2);

  assert_kiln_ok(kiln_model_set_training(model, 0));
  assert_kiln_ok(kiln_model_forward(model, x, &t1));
  assert_tensor_close(t1, want, 400, 1e-12, 1e-14);
  kiln_tensor_release(t1);
  kiln_tensor_release(wt);
  kiln_tensor_release(bt);
  kiln_tensor_release(x);
  kiln_model_release(model);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layers_with_cross_entropy),
      cmocka_unit_test(test_regression_losses),
      cmocka_unit_test(test_dropout_scaling),
  };
  return cmocka_run_group_tests(tests, kiln_test_context_setup, kiln_test_context_teardown);
}
