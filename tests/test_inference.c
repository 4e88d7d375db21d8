/* The inference path through the public API (nn/model_inference.cpp):
 * predict and forward against a float64 reference computed from the
 * parameters read back, for every activation, Dropout, batch sizes on both
 * sides of the kernels' tiles, every predict kind and input dtype, with 1
 * and 2 threads; the packed weights following every way the parameters
 * change (a parameter view's copy_from_host, a training step, load_weights,
 * writes through a DLPack export); and several threads predicting with one
 * model. test_inference_alloc.c counts a call's allocations. */
#include "support.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/dlpack.h"
#include "kiln/kiln.h"

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};

typedef struct {
  const char *text;
  int layers;         /* Linear layers */
  const char *act;    /* between them */
  double leaky_slope; /* for leaky_relu */
} spec_case;

static const spec_case specs[] = {
    {"20-33-7", 2, "relu", 0},
    {"12-40-17-5:gelu", 3, "gelu", 0},
    {"12-40-17-5:tanh:dropout=0.3", 3, "tanh", 0},
    {"30-70-3:sigmoid", 2, "sigmoid", 0},
    {"9-50-4:leaky_relu=0.2", 2, "leaky_relu", 0.2},
};

static double activate(const spec_case *s, double v) {
  if (!strcmp(s->act, "relu")) return v < 0 ? 0 : v;
  if (!strcmp(s->act, "gelu")) return 0.5 * v * (1 + erf(v / sqrt(2.0)));
  if (!strcmp(s->act, "tanh")) return tanh(v);
  if (!strcmp(s->act, "sigmoid")) return 1 / (1 + exp(-v));
  return v < 0 ? s->leaky_slope * v : v;
}

/* The logits of x [rows, in] through the model's current parameters, in
 * double (Dropout is the identity in evaluation). */
static double *reference(kiln_model *model, const spec_case *s, const double *x, int64_t rows) {
  int64_t width = 0;
  assert_kiln_ok(kiln_model_input_size(model, &width));
  double *h = malloc(sizeof(double) * (size_t)(rows * width));
  assert_non_null(h);
  memcpy(h, x, sizeof(double) * (size_t)(rows * width));
  for (int l = 0; l < s->layers; ++l) {
    kiln_tensor *w = NULL, *b = NULL;
    assert_kiln_ok(kiln_model_parameter(model, 2 * l, &w));
    assert_kiln_ok(kiln_model_parameter(model, 2 * l + 1, &b));
    int64_t out = 0;
    assert_kiln_ok(kiln_tensor_dim(w, 0, &out));
    double *wv = malloc(sizeof(double) * (size_t)(out * width)), *bv = malloc(sizeof(double) * (size_t)out);
    double *next = malloc(sizeof(double) * (size_t)(rows * out));
    assert_true(wv && bv && next);
    kiln_test_read_f64(w, wv, out * width);
    kiln_test_read_f64(b, bv, out);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < out; ++j) {
        double sum = bv[j];
        for (int64_t p = 0; p < width; ++p) sum += h[i * width + p] * wv[j * width + p];
        next[i * out + j] = l + 1 < s->layers ? activate(s, sum) : sum;
      }
    free(h);
    free(wv);
    free(bv);
    kiln_tensor_release(w);
    kiln_tensor_release(b);
    h = next;
    width = out;
  }
  return h;
}

static kiln_tensor *input(kiln_context *ctx, double *x, int64_t rows, int64_t in, uint64_t seed) {
  kiln_test_rng rng = kiln_test_rng_make(seed);
  float *xf = malloc(sizeof(float) * (size_t)(rows * in));
  assert_non_null(xf);
  for (int64_t i = 0; i < rows * in; ++i) xf[i] = (float)kiln_test_rng_uniform(&rng, -1, 1), x[i] = xf[i];
  const int64_t shape[2] = {rows, in};
  kiln_tensor *t = NULL;
  assert_kiln_ok(kiln_tensor_from_host(ctx, xf, (int64_t)sizeof(float) * rows * in, shape, 2, KILN_F32, cpu, &t));
  free(xf);
  return t;
}

/* predict's logits against the reference, within fp32 accumulation. */
static void assert_predicts(kiln_model *model, const spec_case *s, kiln_tensor *xt, const double *x, int64_t rows) {
  double *want = reference(model, s, x, rows);
  int64_t out = 0;
  assert_kiln_ok(kiln_model_output_size(model, &out));
  kiln_tensor *y = NULL;
  assert_kiln_ok(kiln_model_predict(model, xt, KILN_PREDICT_LOGITS, &y));
  assert_tensor_close(y, want, rows * out, 1e-5, 1e-5);
  kiln_tensor_release(y);
  free(want);
}

static void predict_matches_reference(void **state) {
  (void)state;
  const int64_t batches[] = {1, 3, 8, 9, 64, 130};
  for (int64_t threads = 1; threads <= 2; ++threads) {
    kiln_context *ctx = kiln_test_cpu_context(7, threads);
    for (size_t c = 0; c < sizeof specs / sizeof specs[0]; ++c) {
      const spec_case *s = &specs[c];
      kiln_model *model = kiln_test_eval_model(ctx, s->text);
      int64_t in = 0, out = 0;
      assert_kiln_ok(kiln_model_input_size(model, &in));
      assert_kiln_ok(kiln_model_output_size(model, &out));
      for (size_t b = 0; b < sizeof batches / sizeof batches[0]; ++b) {
        const int64_t rows = batches[b];
        double *x = malloc(sizeof(double) * (size_t)(rows * in));
        assert_non_null(x);
        kiln_tensor *xt = input(ctx, x, rows, in, 100 + (uint64_t)rows);
        double *want = reference(model, s, x, rows);
        assert_predicts(model, s, xt, x, rows);
        /* forward in evaluation mode is the same path. */
        kiln_tensor *y = NULL;
        assert_kiln_ok(kiln_model_forward(model, xt, &y));
        assert_tensor_close(y, want, rows * out, 1e-5, 1e-5);
        kiln_tensor_release(y);
        /* Probabilities and classes from the same logits. */
        double *probs = malloc(sizeof(double) * (size_t)(rows * out)), *classes = malloc(sizeof(double) * (size_t)rows);
        assert_true(probs && classes);
        for (int64_t i = 0; i < rows; ++i) {
          double max = want[i * out], sum = 0;
          int64_t best = 0;
          for (int64_t j = 1; j < out; ++j)
            if (want[i * out + j] > max) max = want[i * out + j], best = j;
          for (int64_t j = 0; j < out; ++j) sum += exp(want[i * out + j] - max);
          for (int64_t j = 0; j < out; ++j) probs[i * out + j] = exp(want[i * out + j] - max) / sum;
          classes[i] = (double)best;
        }
        assert_kiln_ok(kiln_model_predict(model, xt, KILN_PREDICT_PROBABILITIES, &y));
        assert_tensor_close(y, probs, rows * out, 1e-5, 1e-6);
        kiln_tensor_release(y);
        assert_kiln_ok(kiln_model_predict(model, xt, KILN_PREDICT_CLASSES, &y));
        kiln_dtype dtype;
        assert_kiln_ok(kiln_tensor_dtype(y, &dtype));
        assert_int_equal(dtype, KILN_I64);
        assert_tensor_close(y, classes, rows, 0, 0);
        kiln_tensor_release(y);
        free(probs);
        free(classes);
        free(want);
        free(x);
        kiln_tensor_release(xt);
      }
      kiln_model_release(model);
    }
    kiln_context_release(ctx);
  }
}

/* u8 and f64 inputs are converted to the model's f32 first, as before. */
static void predict_converts_inputs(void **state) {
  (void)state;
  kiln_context *ctx = kiln_test_cpu_context(7, 1);
  const spec_case *s = &specs[0];
  kiln_model *model = kiln_test_eval_model(ctx, s->text);
  const int64_t rows = 5, in = 20, shape[2] = {5, 20};
  unsigned char u8[100];
  double x[100];
  for (int i = 0; i < 100; ++i) u8[i] = (unsigned char)(i * 37 % 256), x[i] = u8[i];
  kiln_tensor *xt = NULL;
  assert_kiln_ok(kiln_tensor_from_host(ctx, u8, sizeof u8, shape, 2, KILN_U8, cpu, &xt));
  assert_predicts(model, s, xt, x, rows);
  kiln_tensor_release(xt);
  assert_kiln_ok(kiln_tensor_from_host(ctx, x, sizeof x, shape, 2, KILN_F64, cpu, &xt));
  assert_predicts(model, s, xt, x, rows);
  kiln_tensor_release(xt);
  kiln_model_release(model);
  kiln_context_release(ctx);
}

/* A model, an input, and a prediction already made (so the weights are
 * packed) for the cases that then change the weights. */
typedef struct {
  kiln_context *ctx;
  kiln_model *model;
  kiln_tensor *xt;
  double x[64 * 20];
} warm_model;

static void warm_up(warm_model *w, int64_t threads, int64_t rows) {
  w->ctx = kiln_test_cpu_context(7, threads);
  w->model = kiln_test_eval_model(w->ctx, specs[0].text);
  w->xt = input(w->ctx, w->x, rows, 20, 5);
  assert_predicts(w->model, &specs[0], w->xt, w->x, rows);
}

static void cool_down(warm_model *w) {
  kiln_tensor_release(w->xt);
  kiln_model_release(w->model);
  kiln_context_release(w->ctx);
}

static void packed_weights_follow_copy_from_host(void **state) {
  (void)state;
  warm_model w;
  warm_up(&w, 2, 64);
  float weights[33 * 20];
  for (int i = 0; i < 33 * 20; ++i) weights[i] = (float)((i % 7) - 3) * 0.05f;
  kiln_tensor *p0 = NULL;
  assert_kiln_ok(kiln_model_parameter(w.model, 0, &p0));
  assert_kiln_ok(kiln_tensor_copy_from_host(p0, weights, sizeof weights));
  kiln_tensor_release(p0);
  assert_predicts(w.model, &specs[0], w.xt, w.x, 64);
  /* Only a part of the flat buffer: the last layer's bias. */
  float bias[7] = {1, -2, 3, -4, 5, -6, 7};
  kiln_tensor *p3 = NULL;
  assert_kiln_ok(kiln_model_parameter(w.model, 3, &p3));
  assert_kiln_ok(kiln_tensor_copy_from_host(p3, bias, sizeof bias));
  kiln_tensor_release(p3);
  assert_predicts(w.model, &specs[0], w.xt, w.x, 64);
  cool_down(&w);
}

static void packed_weights_follow_training(void **state) {
  (void)state;
  warm_model w;
  warm_up(&w, 1, 8);
  kiln_trainer_options *o = NULL;
  kiln_trainer *trainer = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_lr(o, 0.5));
  assert_kiln_ok(kiln_trainer_create(w.model, o, &trainer));
  kiln_trainer_options_release(o);
  int64_t labels[8] = {0, 1, 2, 3, 4, 5, 6, 0};
  const int64_t n = 8;
  kiln_tensor *y = NULL;
  assert_kiln_ok(kiln_tensor_from_host(w.ctx, labels, sizeof labels, &n, 1, KILN_I64, cpu, &y));
  for (int step = 0; step < 3; ++step) {
    assert_kiln_ok(kiln_trainer_step(trainer, w.xt, y, NULL));
    assert_kiln_ok(kiln_model_set_training(w.model, 0));
    assert_predicts(w.model, &specs[0], w.xt, w.x, 8);
  }
  kiln_tensor_release(y);
  kiln_trainer_release(trainer);
  cool_down(&w);
}

static void packed_weights_follow_load_weights(void **state) {
  (void)state;
  kiln_test_file_fixture *f = kiln_test_file_fixture_create("other.safetensors");
  warm_model w;
  warm_up(&w, 1, 3);
  assert_kiln_ok(kiln_context_set_seed(w.ctx, 99));
  kiln_model *other = kiln_test_eval_model(w.ctx, specs[0].text);
  assert_kiln_ok(kiln_model_save(other, f->path));
  assert_kiln_ok(kiln_model_load_weights(w.model, f->path));
  assert_predicts(w.model, &specs[0], w.xt, w.x, 3);
  kiln_model_release(other);
  cool_down(&w);
  kiln_test_file_fixture_destroy(f);
}

/* A writable export lets another tool write the weights behind kiln's
 * back: every prediction while it is held reads them as they are now. */
static void packed_weights_follow_dlpack_writes(void **state) {
  (void)state;
  warm_model w;
  warm_up(&w, 1, 8);
  kiln_tensor *p0 = NULL;
  DLManagedTensorVersioned *shared = NULL;
  assert_kiln_ok(kiln_model_parameter(w.model, 0, &p0));
  assert_kiln_ok(kiln_tensor_to_dlpack(p0, 0, &shared));
  float *data = (float *)shared->dl_tensor.data;
  for (int round = 1; round <= 3; ++round) {
    for (int i = 0; i < 33 * 20; ++i) data[i] = (float)(((i * round) % 11) - 5) * 0.03f;
    assert_predicts(w.model, &specs[0], w.xt, w.x, 8);
  }
  data[0] = 2.5f;
  shared->deleter(shared); /* the last write happened while it was held */
  assert_predicts(w.model, &specs[0], w.xt, w.x, 8);
  kiln_tensor_release(p0);
  cool_down(&w);
}

/* Several threads predicting with one model at once (a model used for
 * inference may be shared): each gets its own buffers, and the first calls
 * race to pack the weights. Every result must match the reference. */
typedef struct {
  kiln_model *model;
  kiln_tensor *xt;
  const double *want;
  int64_t n;
  int ok;
} racer;

static void *race(void *arg) {
  racer *r = arg;
  r->ok = 1;
  for (int i = 0; i < 50 && r->ok; ++i) {
    kiln_tensor *y = NULL;
    float got[64 * 7];
    r->ok = kiln_model_predict(r->model, r->xt, KILN_PREDICT_LOGITS, &y) == KILN_OK &&
            kiln_tensor_copy_to_host(y, got, (int64_t)sizeof(float) * r->n) == KILN_OK;
    for (int64_t j = 0; j < r->n && r->ok; ++j) r->ok = fabs(got[j] - r->want[j]) <= 1e-5 + 1e-5 * fabs(r->want[j]);
    kiln_tensor_release(y);
  }
  return NULL;
}

static void predict_from_several_threads(void **state) {
  (void)state;
  kiln_context *ctx = kiln_test_cpu_context(7, 2);
  kiln_model *model = kiln_test_eval_model(ctx, specs[0].text);
  const int64_t batches[4] = {1, 8, 64, 13};
  racer racers[4];
  double *inputs[4];
  pthread_t threads[4];
  for (int t = 0; t < 4; ++t) {
    inputs[t] = malloc(sizeof(double) * (size_t)(batches[t] * 20));
    assert_non_null(inputs[t]);
    racers[t].model = model;
    racers[t].xt = input(ctx, inputs[t], batches[t], 20, 40 + (uint64_t)t);
    racers[t].want = reference(model, &specs[0], inputs[t], batches[t]);
    racers[t].n = batches[t] * 7;
  }
  for (int t = 0; t < 4; ++t) assert_int_equal(pthread_create(&threads[t], NULL, race, &racers[t]), 0);
  for (int t = 0; t < 4; ++t) {
    assert_int_equal(pthread_join(threads[t], NULL), 0);
    assert_true(racers[t].ok);
    kiln_tensor_release(racers[t].xt);
    free((void *)racers[t].want);
    free(inputs[t]);
  }
  kiln_model_release(model);
  kiln_context_release(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(predict_matches_reference),
      cmocka_unit_test(predict_converts_inputs),
      cmocka_unit_test(packed_weights_follow_copy_from_host),
      cmocka_unit_test(packed_weights_follow_training),
      cmocka_unit_test(packed_weights_follow_load_weights),
      cmocka_unit_test(packed_weights_follow_dlpack_writes),
      cmocka_unit_test(predict_from_several_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
