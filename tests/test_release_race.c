/* Every function that takes a handle, raced against the release of each
 * handle it takes (issue 21 item 4). A thread calls the function over and
 * over while the main thread releases the handle at a random moment: every
 * call must return what the call returns undisturbed or, once the handle is
 * gone, KILN_ERROR_INVALID_HANDLE, and never touch a freed object, which the
 * ASan lane reports as a use-after-free and the TSan lane as a race
 * (scripts/test.sh runs this program in both). kiln holds a counted
 * reference to each handle's object for the whole call (src/api/handles.hpp,
 * CallPins); before it did, kiln_trainer_attach_communicator freed the
 * trainer under its own weight broadcast, and the options and spec setters
 * wrote into freed builders.
 *
 * `test_release_race --list` prints the functions raced, one a line:
 * tests/release_race_coverage.py compares them with every function of
 * kiln.h and kiln/dlpack.h that takes a handle, so a new one cannot be left
 * out. KILN_RACE_ROUNDS sets the rounds per function and handle (default
 * 6; the communicator's rows, whose race the issue found, take 20 times as
 * many); KILN_RACE_ONLY=TEXT races only the functions whose name holds TEXT.
 * Rows that need a communicator are skipped, saying why, where
 * libkiln_dist.so is missing (the sanitizer lanes build without it). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/dlpack.h"
#include "support.h"

static const kiln_device kCpu = {KILN_DEVICE_CPU, -1};

/* The handles a row may take, one of each kind per round. */
enum {
  CTX, CTX_OPTIONS, TX, TY, TP, SPEC, MODEL, DATASET, OPTIONS, TRAINER, HISTORY, COMM, N_HANDLES
};
static const char *const kHandleNames[N_HANDLES] = {"context", "context options", "x", "y", "pred", "spec",
                                                    "model", "dataset", "trainer options", "trainer", "history",
                                                    "communicator"};
#define BIT(h) (1u << (h))

/* Files every round reads: a 4-3-2 model, a checkpoint of a trainer over
 * it, the model as ONNX (absent without the plugin: the call then fails the
 * same way every time). Writes go to `out`. */
static char g_dir[512], g_model[700], g_checkpoint[700], g_onnx[700], g_out[700];
static int g_have_comm = -1; /* -1: not tried; 0: no plugin (g_no_comm says why) */
static char g_no_comm[512];

typedef struct world {
  void *h[N_HANDLES];
} world;

/* ---- the handles of a round ---------------------------------------------- */

static kiln_context *new_context(void) {
  kiln_context_options *o = NULL;
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_options_create(&o));
  assert_kiln_ok(kiln_context_options_set_num_threads(o, 1));
  assert_kiln_ok(kiln_context_options_set_log_level(o, KILN_LOG_OFF));
  assert_kiln_ok(kiln_context_create(o, &ctx));
  kiln_context_options_release(o);
  return ctx;
}

static kiln_trainer *new_trainer(kiln_model *model) {
  kiln_trainer_options *o = NULL;
  kiln_trainer *t = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&o));
  assert_kiln_ok(kiln_trainer_options_set_batch_size(o, 4));
  assert_kiln_ok(kiln_trainer_create(model, o, &t));
  kiln_trainer_options_release(o);
  return t;
}

/* Creates handle k of w (and what it is made from) unless it exists. */
static void need(world *w, int k) {
  if (w->h[k]) return;
  static const float xs[8 * 4] = {0.1f, -0.2f, 0.3f, 0.4f, 0.5f, 0.6f, -0.7f, 0.8f, 0.9f, 1.0f, -1.1f, 1.2f, 0.1f, 0.2f,
                                  0.3f, -0.4f, 0.5f, 0.6f, 0.7f, 0.8f, -0.9f, 1.0f, 1.1f, 1.2f, 0.2f, 0.1f, 0.0f, -0.1f,
                                  0.3f, 0.2f, 0.1f, 0.0f};
  static const int64_t ys[8] = {0, 1, 1, 0, 1, 0, 0, 1};
  static const float ps[8 * 2] = {0.5f, -0.5f, 1.0f, 2.0f, 0.0f, 0.0f, -1.0f, 1.0f,
                                  0.3f, 0.1f,  2.0f, 1.0f, 0.7f, 0.2f, 0.1f,  0.9f};
  const int64_t xshape[2] = {8, 4}, yshape[1] = {8}, pshape[2] = {8, 2};
  switch (k) {
    case CTX: w->h[k] = new_context(); break;
    case CTX_OPTIONS: assert_kiln_ok(kiln_context_options_create((kiln_context_options **)&w->h[k])); break;
    case TX:
      need(w, CTX);
      w->h[k] = kiln_test_tensor_f32(w->h[CTX], xs, xshape, 2, kCpu);
      break;
    case TY:
      need(w, CTX);
      assert_kiln_ok(
          kiln_tensor_from_host(w->h[CTX], ys, sizeof ys, yshape, 1, KILN_I64, kCpu, (kiln_tensor **)&w->h[k]));
      break;
    case TP:
      need(w, CTX);
      w->h[k] = kiln_test_tensor_f32(w->h[CTX], ps, pshape, 2, kCpu);
      break;
    case SPEC:
      assert_kiln_ok(kiln_model_spec_create((kiln_model_spec **)&w->h[k]));
      assert_kiln_ok(kiln_model_spec_parse(w->h[k], "4-3-2"));
      break;
    case MODEL:
      need(w, CTX);
      w->h[k] = kiln_test_model(w->h[CTX], "4-3-2");
      break;
    case DATASET:
      need(w, TX);
      need(w, TY);
      assert_kiln_ok(kiln_dataset_from_tensors(w->h[CTX], w->h[TX], w->h[TY], (kiln_dataset **)&w->h[k]));
      break;
    case OPTIONS: assert_kiln_ok(kiln_trainer_options_create((kiln_trainer_options **)&w->h[k])); break;
    case TRAINER:
      need(w, MODEL);
      w->h[k] = new_trainer(w->h[MODEL]);
      break;
    case HISTORY: {
      need(w, MODEL);
      need(w, DATASET);
      kiln_trainer *t = new_trainer(w->h[MODEL]);
      assert_kiln_ok(kiln_trainer_fit(t, w->h[DATASET], NULL, 1, NULL, NULL, (kiln_history **)&w->h[k]));
      kiln_trainer_release(t);
      break;
    }
    case COMM:
      need(w, CTX);
      assert_kiln_ok(kiln_communicator_create_mpi(w->h[CTX], (kiln_communicator **)&w->h[k]));
      break;
  }
}

static void release(int k, void *h) {
  switch (k) {
    case CTX: kiln_context_release(h); break;
    case CTX_OPTIONS: kiln_context_options_release(h); break;
    case TX: case TY: case TP: kiln_tensor_release(h); break;
    case SPEC: kiln_model_spec_release(h); break;
    case MODEL: kiln_model_release(h); break;
    case DATASET: kiln_dataset_release(h); break;
    case OPTIONS: kiln_trainer_options_release(h); break;
    case TRAINER: kiln_trainer_release(h); break;
    case HISTORY: kiln_history_release(h); break;
    case COMM: kiln_communicator_release(h); break;
  }
}

/* ---- the calls: each returns its status and releases what it made ------- */

#define W(k) (w->h[k])
#define RELEASE_IF_OK(status, fn, obj) \
  do {                                 \
    if ((status) == KILN_OK) fn(obj);  \
  } while (0)

/* A call that makes an object of `type` in t: released when it was made. */
#define MAKER(name, type, release_fn, expr) \
  static kiln_status name(world *w) {       \
    type *t = NULL;                          \
    kiln_status s = (expr);                  \
    RELEASE_IF_OK(s, release_fn, t);         \
    return s;                                \
  }
#define TENSOR_MAKER(name, expr) MAKER(name, kiln_tensor, kiln_tensor_release, expr)

/* A getter of one int64_t. */
#define I64_GETTER(name, fn, k)     \
  static kiln_status name(world *w) { \
    int64_t v;                       \
    return fn(W(k), &v);             \
  }

/* Contexts and options. */
static kiln_status c_ctx_options_set_seed(world *w) { return kiln_context_options_set_seed(W(CTX_OPTIONS), 3); }
static kiln_status c_ctx_options_set_num_threads(world *w) {
  return kiln_context_options_set_num_threads(W(CTX_OPTIONS), 1);
}
static kiln_status c_ctx_options_set_log_level(world *w) {
  return kiln_context_options_set_log_level(W(CTX_OPTIONS), KILN_LOG_OFF);
}
static kiln_status c_ctx_options_set_log_callback(world *w) {
  return kiln_context_options_set_log_callback(W(CTX_OPTIONS), NULL, NULL);
}
static kiln_status c_ctx_options_set_enable_cuda(world *w) {
  return kiln_context_options_set_enable_cuda(W(CTX_OPTIONS), 0);
}
MAKER(c_context_create, kiln_context, kiln_context_release, kiln_context_create(W(CTX_OPTIONS), &t))
MAKER(c_context_retain, kiln_context, kiln_context_release, kiln_context_retain(W(CTX), &t))
static kiln_status c_context_set_seed(world *w) { return kiln_context_set_seed(W(CTX), 5); }
static kiln_status c_device_parse(world *w) {
  kiln_device d;
  return kiln_device_parse(W(CTX), "cpu", &d);
}
static kiln_status c_cuda_is_available(world *w) {
  int v;
  return kiln_cuda_is_available(W(CTX), &v);
}
static kiln_status c_cuda_unavailable_reason(world *w) {
  const char *why;
  return kiln_cuda_unavailable_reason(W(CTX), &why);
}
static kiln_status c_device_count(world *w) {
  int64_t n;
  return kiln_device_count(W(CTX), KILN_DEVICE_CUDA, &n);
}
static kiln_status c_default_device(world *w) {
  kiln_device d;
  return kiln_default_device(W(CTX), &d);
}
static kiln_status c_device_get_info(world *w) {
  kiln_device_info info = {sizeof info};
  return kiln_device_get_info(W(CTX), kCpu, &info);
}
static kiln_status c_device_synchronize(world *w) { return kiln_device_synchronize(W(CTX), kCpu); }

/* Tensors. */
static const int64_t kShape[2] = {3, 5};
TENSOR_MAKER(c_tensor_empty, kiln_tensor_empty(W(CTX), kShape, 2, KILN_F32, kCpu, &t))
TENSOR_MAKER(c_tensor_zeros, kiln_tensor_zeros(W(CTX), kShape, 2, KILN_F32, kCpu, &t))
TENSOR_MAKER(c_tensor_ones, kiln_tensor_ones(W(CTX), kShape, 2, KILN_F32, kCpu, &t))
TENSOR_MAKER(c_tensor_full, kiln_tensor_full(W(CTX), kShape, 2, KILN_F32, kCpu, 2.5, &t))
TENSOR_MAKER(c_tensor_arange, kiln_tensor_arange(W(CTX), 0, 10, 1, KILN_F32, kCpu, &t))
TENSOR_MAKER(c_tensor_rand, kiln_tensor_rand(W(CTX), kShape, 2, KILN_F32, kCpu, &t))
TENSOR_MAKER(c_tensor_randn, kiln_tensor_randn(W(CTX), kShape, 2, KILN_F32, kCpu, &t))
static const float kFifteen[15] = {0};
TENSOR_MAKER(c_tensor_from_host,
             kiln_tensor_from_host(W(CTX), kFifteen, sizeof kFifteen, kShape, 2, KILN_F32, kCpu, &t))
TENSOR_MAKER(c_tensor_empty_pinned, kiln_tensor_empty_pinned(W(CTX), kShape, 2, KILN_F32, &t))
TENSOR_MAKER(c_tensor_retain, kiln_tensor_retain(W(TX), &t))
TENSOR_MAKER(c_tensor_to, kiln_tensor_to(W(TX), kCpu, &t))
TENSOR_MAKER(c_tensor_cast, kiln_tensor_cast(W(TX), KILN_F64, &t))
TENSOR_MAKER(c_tensor_clone, kiln_tensor_clone(W(TX), &t))
static const int64_t kFlat[1] = {-1};
TENSOR_MAKER(c_tensor_reshape, kiln_tensor_reshape(W(TX), kFlat, 1, &t))
TENSOR_MAKER(c_tensor_rows, kiln_tensor_rows(W(TX), 1, 3, &t))
TENSOR_MAKER(c_tensor_binary, kiln_tensor_binary(KILN_ADD, W(TX), W(TP), &t)) /* [8,4] + [8,2]: SHAPE_MISMATCH */
TENSOR_MAKER(c_tensor_scalar, kiln_tensor_scalar(KILN_MUL, W(TX), 2.0, &t))
TENSOR_MAKER(c_tensor_compare, kiln_tensor_compare(KILN_GT, W(TX), W(TX), &t))
TENSOR_MAKER(c_tensor_unary, kiln_tensor_unary(KILN_TANH, W(TX), 0, &t))
TENSOR_MAKER(c_tensor_softmax, kiln_tensor_softmax(W(TP), 1, &t))
TENSOR_MAKER(c_tensor_log_softmax, kiln_tensor_log_softmax(W(TP), 1, &t))
TENSOR_MAKER(c_tensor_reduce, kiln_tensor_reduce(KILN_SUM, W(TX), 0, 0, &t))
TENSOR_MAKER(c_tensor_matmul, kiln_tensor_matmul(W(TP), W(TX), &t)) /* [8,2] x [8,4]: SHAPE_MISMATCH */
static kiln_status c_tensor_copy_to_host(world *w) {
  float buf[32];
  return kiln_tensor_copy_to_host(W(TX), buf, sizeof buf);
}
static kiln_status c_tensor_copy_from_host(world *w) {
  float buf[32] = {0};
  return kiln_tensor_copy_from_host(W(TP), buf, 16 * sizeof(float));
}
static kiln_status c_tensor_item(world *w) {
  double v;
  return kiln_tensor_item(W(TX), &v); /* not one element: INVALID_ARGUMENT */
}
I64_GETTER(c_tensor_ndim, kiln_tensor_ndim, TX)
static kiln_status c_tensor_dim(world *w) {
  int64_t v;
  return kiln_tensor_dim(W(TX), 1, &v);
}
static kiln_status c_tensor_shape(world *w) {
  int64_t shape[8];
  return kiln_tensor_shape(W(TX), shape, 8);
}
I64_GETTER(c_tensor_numel, kiln_tensor_numel, TX)
static kiln_status c_tensor_dtype(world *w) {
  kiln_dtype d;
  return kiln_tensor_dtype(W(TX), &d);
}
static kiln_status c_tensor_device(world *w) {
  kiln_device d;
  return kiln_tensor_device(W(TX), &d);
}
I64_GETTER(c_tensor_get_device, kiln_tensor_get_device, TX)
static kiln_status c_tensor_is_pinned(world *w) {
  int v;
  return kiln_tensor_is_pinned(W(TX), &v);
}
static kiln_status c_tensor_to_dlpack(world *w) {
  DLManagedTensorVersioned *m = NULL;
  kiln_status s = kiln_tensor_to_dlpack(W(TX), 0, &m);
  if (s == KILN_OK) m->deleter(m);
  return s;
}
/* The DLPack struct comes from a tensor of a context of its own (not one
 * of the handles raced); from_dlpack races the release of ctx. */
static kiln_context *g_dlpack_ctx;
static kiln_tensor *g_dlpack_source;
static kiln_status c_tensor_from_dlpack(world *w) {
  DLManagedTensorVersioned *m = NULL;
  assert_kiln_ok(kiln_tensor_to_dlpack(g_dlpack_source, 0, &m));
  kiln_tensor *t = NULL;
  kiln_status s = kiln_tensor_from_dlpack(W(CTX), m, &t);
  if (s == KILN_OK) kiln_tensor_release(t); /* calls the deleter */
  else m->deleter(m);                       /* a refusal leaves it to us */
  return s;
}

/* Specs and models. */
static kiln_status c_spec_add_linear(world *w) { return kiln_model_spec_add_linear(W(SPEC), 2, 2, 1); }
static kiln_status c_spec_add(world *w) { return kiln_model_spec_add(W(SPEC), KILN_LAYER_RELU, 0); }
static kiln_status c_spec_add_v2(world *w) { return kiln_model_spec_add_v2(W(SPEC), KILN_LAYER_SOFTPLUS, 2, 10); }
static kiln_status c_spec_add_mlp(world *w) {
  const int64_t sizes[2] = {2, 2};
  return kiln_model_spec_add_mlp(W(SPEC), sizes, 2, KILN_LAYER_RELU);
}
static kiln_status c_spec_parse(world *w) { return kiln_model_spec_parse(W(SPEC), "2-2"); }
MAKER(c_model_create, kiln_model, kiln_model_release, kiln_model_create(W(CTX), W(SPEC), kCpu, &t))
MAKER(c_model_create_dtype, kiln_model, kiln_model_release,
      kiln_model_create_dtype(W(CTX), W(SPEC), kCpu, KILN_F64, &t))
MAKER(c_model_retain, kiln_model, kiln_model_release, kiln_model_retain(W(MODEL), &t))
static kiln_status c_model_to(world *w) { return kiln_model_to(W(MODEL), kCpu); }
static kiln_status c_model_device(world *w) {
  kiln_device d;
  return kiln_model_device(W(MODEL), &d);
}
static kiln_status c_model_set_training(world *w) { return kiln_model_set_training(W(MODEL), 1); }
static kiln_status c_model_is_training(world *w) {
  int v;
  return kiln_model_is_training(W(MODEL), &v);
}
I64_GETTER(c_model_num_parameters, kiln_model_num_parameters, MODEL)
I64_GETTER(c_model_input_size, kiln_model_input_size, MODEL)
I64_GETTER(c_model_output_size, kiln_model_output_size, MODEL)
static kiln_status c_model_describe(world *w) {
  const char *text;
  return kiln_model_describe(W(MODEL), &text);
}
I64_GETTER(c_model_num_parameter_tensors, kiln_model_num_parameter_tensors, MODEL)
TENSOR_MAKER(c_model_parameter, kiln_model_parameter(W(MODEL), 0, &t))
static kiln_status c_model_parameter_name(world *w) {
  const char *name;
  return kiln_model_parameter_name(W(MODEL), 1, &name);
}
TENSOR_MAKER(c_model_forward, kiln_model_forward(W(MODEL), W(TX), &t))
TENSOR_MAKER(c_model_predict, kiln_model_predict(W(MODEL), W(TX), KILN_PREDICT_CLASSES, &t))
static kiln_status c_model_save(world *w) { return kiln_model_save(W(MODEL), g_out); }
MAKER(c_model_load, kiln_model, kiln_model_release, kiln_model_load(W(CTX), g_model, kCpu, &t))
static kiln_status c_model_load_weights(world *w) { return kiln_model_load_weights(W(MODEL), g_model); }
MAKER(c_model_load_with_spec, kiln_model, kiln_model_release,
      kiln_model_load_with_spec(W(CTX), g_model, W(SPEC), kCpu, &t))
static kiln_status c_model_export_onnx(world *w) { return kiln_model_export_onnx(W(MODEL), g_out); }
static kiln_status c_model_export_onnx_v2(world *w) {
  return kiln_model_export_onnx_v2(W(MODEL), g_out, KILN_ONNX_EXPORT_EXTERNAL_DATA);
}
MAKER(c_model_import_onnx, kiln_model, kiln_model_release, kiln_model_import_onnx(W(CTX), g_onnx, &t))

/* Datasets and losses. */
MAKER(c_dataset_from_tensors, kiln_dataset, kiln_dataset_release, kiln_dataset_from_tensors(W(CTX), W(TX), W(TY), &t))
static kiln_status c_dataset_load_idx(world *w) {
  kiln_dataset *d = NULL;
  return kiln_dataset_load_idx(W(CTX), "/nonexistent/images", "/nonexistent/labels", &d); /* IO */
}
static kiln_status c_dataset_load_mnist(world *w) {
  kiln_dataset *d = NULL;
  return kiln_dataset_load_mnist(W(CTX), "/nonexistent", "train", &d); /* IO */
}
MAKER(c_dataset_retain, kiln_dataset, kiln_dataset_release, kiln_dataset_retain(W(DATASET), &t))
I64_GETTER(c_dataset_size, kiln_dataset_size, DATASET)
I64_GETTER(c_dataset_num_features, kiln_dataset_num_features, DATASET)
I64_GETTER(c_dataset_num_classes, kiln_dataset_num_classes, DATASET)
static kiln_status c_dataset_set_normalization(world *w) {
  return kiln_dataset_set_normalization(W(DATASET), 1.0, 0.0, 1.0);
}
static kiln_status c_dataset_split(world *w) {
  kiln_dataset *a = NULL, *b = NULL;
  kiln_status s = kiln_dataset_split(W(DATASET), 0.25, 1, &a, &b);
  if (s == KILN_OK) kiln_dataset_release(a), kiln_dataset_release(b);
  return s;
}
static kiln_status c_dataset_batch(world *w) {
  kiln_tensor *x = NULL, *y = NULL;
  kiln_status s = kiln_dataset_batch(W(DATASET), 2, 4, kCpu, &x, &y);
  if (s == KILN_OK) kiln_tensor_release(x), kiln_tensor_release(y);
  return s;
}
static kiln_status c_loss(world *w) {
  double v;
  return kiln_loss(KILN_LOSS_CROSS_ENTROPY, W(TP), W(TY), &v);
}

/* Trainer options, trainers, histories. */
static kiln_status c_opt_set_loss(world *w) { return kiln_trainer_options_set_loss(W(OPTIONS), KILN_LOSS_MSE); }
static kiln_status c_opt_set_optimizer(world *w) {
  return kiln_trainer_options_set_optimizer(W(OPTIONS), KILN_OPTIM_ADAM);
}
static kiln_status c_opt_set_lr(world *w) { return kiln_trainer_options_set_lr(W(OPTIONS), 0.01); }
static kiln_status c_opt_set_momentum(world *w) { return kiln_trainer_options_set_momentum(W(OPTIONS), 0.9); }
static kiln_status c_opt_set_nesterov(world *w) { return kiln_trainer_options_set_nesterov(W(OPTIONS), 1); }
static kiln_status c_opt_set_weight_decay(world *w) { return kiln_trainer_options_set_weight_decay(W(OPTIONS), 0.1); }
static kiln_status c_opt_set_betas(world *w) { return kiln_trainer_options_set_betas(W(OPTIONS), 0.8, 0.9); }
static kiln_status c_opt_set_eps(world *w) { return kiln_trainer_options_set_eps(W(OPTIONS), 1e-6); }
static kiln_status c_opt_set_batch_size(world *w) { return kiln_trainer_options_set_batch_size(W(OPTIONS), 4); }
static kiln_status c_opt_set_grad_clip(world *w) { return kiln_trainer_options_set_grad_clip(W(OPTIONS), 1.0); }
static kiln_status c_opt_set_schedule(world *w) {
  return kiln_trainer_options_set_schedule(W(OPTIONS), KILN_LR_STEP, 2, 0.5, 0, 0);
}
static kiln_status c_opt_set_warmup(world *w) { return kiln_trainer_options_set_warmup(W(OPTIONS), 3); }
static kiln_status c_opt_set_shuffle_seed(world *w) { return kiln_trainer_options_set_shuffle_seed(W(OPTIONS), 9); }
static kiln_status c_opt_set_progress_interval(world *w) {
  return kiln_trainer_options_set_progress_interval(W(OPTIONS), 2);
}
static kiln_status c_opt_set_devices(world *w) { return kiln_trainer_options_set_devices(W(OPTIONS), &kCpu, 1); }
static kiln_status c_opt_set_bucket_bytes(world *w) { return kiln_trainer_options_set_bucket_bytes(W(OPTIONS), 1024); }
static kiln_status c_opt_set_label_smoothing(world *w) {
  return kiln_trainer_options_set_label_smoothing(W(OPTIONS), 0.1);
}
static kiln_status c_opt_set_precision(world *w) {
  return kiln_trainer_options_set_precision(W(OPTIONS), KILN_PRECISION_BF16);
}
static kiln_status c_opt_set_fast_path(world *w) { return kiln_trainer_options_set_fast_path(W(OPTIONS), 0); }
MAKER(c_trainer_create, kiln_trainer, kiln_trainer_release, kiln_trainer_create(W(MODEL), W(OPTIONS), &t))
MAKER(c_trainer_retain, kiln_trainer, kiln_trainer_release, kiln_trainer_retain(W(TRAINER), &t))
static kiln_status c_trainer_step(world *w) {
  double loss;
  return kiln_trainer_step(W(TRAINER), W(TX), W(TY), &loss);
}
static kiln_status c_trainer_epoch(world *w) {
  kiln_epoch_stats s = {sizeof s};
  return kiln_trainer_epoch(W(TRAINER), W(DATASET), &s);
}
MAKER(c_trainer_fit, kiln_history, kiln_history_release,
      kiln_trainer_fit(W(TRAINER), W(DATASET), W(DATASET), 1, NULL, NULL, &t))
static kiln_status c_trainer_evaluate(world *w) {
  double loss, accuracy;
  return kiln_trainer_evaluate(W(TRAINER), W(DATASET), &loss, &accuracy);
}
I64_GETTER(c_trainer_epochs_done, kiln_trainer_epochs_done, TRAINER)
I64_GETTER(c_trainer_steps_done, kiln_trainer_steps_done, TRAINER)
static kiln_status c_trainer_current_lr(world *w) {
  double v;
  return kiln_trainer_current_lr(W(TRAINER), &v);
}
static kiln_status c_trainer_save_checkpoint(world *w) { return kiln_trainer_save_checkpoint(W(TRAINER), g_out); }
static kiln_status c_trainer_load_checkpoint(world *w) {
  return kiln_trainer_load_checkpoint(W(TRAINER), g_checkpoint);
}
MAKER(c_history_retain, kiln_history, kiln_history_release, kiln_history_retain(W(HISTORY), &t))
I64_GETTER(c_history_size, kiln_history_size, HISTORY)
static kiln_status c_history_get(world *w) {
  kiln_epoch_stats s = {sizeof s};
  return kiln_history_get(W(HISTORY), 0, &s);
}

/* Communicators. */
MAKER(c_comm_create_mpi, kiln_communicator, kiln_communicator_release, kiln_communicator_create_mpi(W(CTX), &t))
static kiln_status c_comm_create_local(world *w) {
  const kiln_device gpu = {KILN_DEVICE_CUDA, 0};
  kiln_communicator *c[1] = {NULL};
  kiln_status s = kiln_communicator_create_local(W(CTX), &gpu, 1, c);
  RELEASE_IF_OK(s, kiln_communicator_release, c[0]);
  return s;
}
MAKER(c_comm_retain, kiln_communicator, kiln_communicator_release, kiln_communicator_retain(W(COMM), &t))
I64_GETTER(c_comm_rank, kiln_communicator_rank, COMM)
I64_GETTER(c_comm_size, kiln_communicator_size, COMM)
I64_GETTER(c_comm_local_rank, kiln_communicator_local_rank, COMM)
static kiln_status c_comm_set_timeout(world *w) { return kiln_communicator_set_timeout(W(COMM), 60); }
static kiln_status c_attach(world *w) { return kiln_trainer_attach_communicator(W(TRAINER), W(COMM)); }

typedef struct row {
  const char *name;
  kiln_status (*call)(world *);
  unsigned uses; /* every handle it takes, each raced in turn */
} row;

#define ROW(fn, call, uses) {#fn, call, uses}
static const row kRows[] = {
    ROW(kiln_context_options_set_seed, c_ctx_options_set_seed, BIT(CTX_OPTIONS)),
    ROW(kiln_context_options_set_num_threads, c_ctx_options_set_num_threads, BIT(CTX_OPTIONS)),
    ROW(kiln_context_options_set_log_level, c_ctx_options_set_log_level, BIT(CTX_OPTIONS)),
    ROW(kiln_context_options_set_log_callback, c_ctx_options_set_log_callback, BIT(CTX_OPTIONS)),
    ROW(kiln_context_options_set_enable_cuda, c_ctx_options_set_enable_cuda, BIT(CTX_OPTIONS)),
    ROW(kiln_context_create, c_context_create, BIT(CTX_OPTIONS)),
    ROW(kiln_context_retain, c_context_retain, BIT(CTX)),
    ROW(kiln_context_set_seed, c_context_set_seed, BIT(CTX)),
    ROW(kiln_device_parse, c_device_parse, BIT(CTX)),
    ROW(kiln_cuda_is_available, c_cuda_is_available, BIT(CTX)),
    ROW(kiln_cuda_unavailable_reason, c_cuda_unavailable_reason, BIT(CTX)),
    ROW(kiln_device_count, c_device_count, BIT(CTX)),
    ROW(kiln_default_device, c_default_device, BIT(CTX)),
    ROW(kiln_device_get_info, c_device_get_info, BIT(CTX)),
    ROW(kiln_device_synchronize, c_device_synchronize, BIT(CTX)),
    ROW(kiln_tensor_empty, c_tensor_empty, BIT(CTX)),
    ROW(kiln_tensor_zeros, c_tensor_zeros, BIT(CTX)),
    ROW(kiln_tensor_ones, c_tensor_ones, BIT(CTX)),
    ROW(kiln_tensor_full, c_tensor_full, BIT(CTX)),
    ROW(kiln_tensor_arange, c_tensor_arange, BIT(CTX)),
    ROW(kiln_tensor_rand, c_tensor_rand, BIT(CTX)),
    ROW(kiln_tensor_randn, c_tensor_randn, BIT(CTX)),
    ROW(kiln_tensor_from_host, c_tensor_from_host, BIT(CTX)),
    ROW(kiln_tensor_empty_pinned, c_tensor_empty_pinned, BIT(CTX)),
    ROW(kiln_tensor_retain, c_tensor_retain, BIT(TX)),
    ROW(kiln_tensor_copy_to_host, c_tensor_copy_to_host, BIT(TX)),
    ROW(kiln_tensor_copy_from_host, c_tensor_copy_from_host, BIT(TP)),
    ROW(kiln_tensor_item, c_tensor_item, BIT(TX)),
    ROW(kiln_tensor_to, c_tensor_to, BIT(TX)),
    ROW(kiln_tensor_cast, c_tensor_cast, BIT(TX)),
    ROW(kiln_tensor_clone, c_tensor_clone, BIT(TX)),
    ROW(kiln_tensor_ndim, c_tensor_ndim, BIT(TX)),
    ROW(kiln_tensor_dim, c_tensor_dim, BIT(TX)),
    ROW(kiln_tensor_shape, c_tensor_shape, BIT(TX)),
    ROW(kiln_tensor_numel, c_tensor_numel, BIT(TX)),
    ROW(kiln_tensor_dtype, c_tensor_dtype, BIT(TX)),
    ROW(kiln_tensor_device, c_tensor_device, BIT(TX)),
    ROW(kiln_tensor_get_device, c_tensor_get_device, BIT(TX)),
    ROW(kiln_tensor_is_pinned, c_tensor_is_pinned, BIT(TX)),
    ROW(kiln_tensor_reshape, c_tensor_reshape, BIT(TX)),
    ROW(kiln_tensor_rows, c_tensor_rows, BIT(TX)),
    ROW(kiln_tensor_binary, c_tensor_binary, BIT(TX) | BIT(TP)),
    ROW(kiln_tensor_scalar, c_tensor_scalar, BIT(TX)),
    ROW(kiln_tensor_compare, c_tensor_compare, BIT(TX)),
    ROW(kiln_tensor_unary, c_tensor_unary, BIT(TX)),
    ROW(kiln_tensor_softmax, c_tensor_softmax, BIT(TP)),
    ROW(kiln_tensor_log_softmax, c_tensor_log_softmax, BIT(TP)),
    ROW(kiln_tensor_reduce, c_tensor_reduce, BIT(TX)),
    ROW(kiln_tensor_matmul, c_tensor_matmul, BIT(TP) | BIT(TX)),
    ROW(kiln_tensor_to_dlpack, c_tensor_to_dlpack, BIT(TX)),
    ROW(kiln_tensor_from_dlpack, c_tensor_from_dlpack, BIT(CTX)),
    ROW(kiln_model_spec_add_linear, c_spec_add_linear, BIT(SPEC)),
    ROW(kiln_model_spec_add, c_spec_add, BIT(SPEC)),
    ROW(kiln_model_spec_add_v2, c_spec_add_v2, BIT(SPEC)),
    ROW(kiln_model_spec_add_mlp, c_spec_add_mlp, BIT(SPEC)),
    ROW(kiln_model_spec_parse, c_spec_parse, BIT(SPEC)),
    ROW(kiln_model_create, c_model_create, BIT(CTX) | BIT(SPEC)),
    ROW(kiln_model_create_dtype, c_model_create_dtype, BIT(CTX) | BIT(SPEC)),
    ROW(kiln_model_retain, c_model_retain, BIT(MODEL)),
    ROW(kiln_model_to, c_model_to, BIT(MODEL)),
    ROW(kiln_model_device, c_model_device, BIT(MODEL)),
    ROW(kiln_model_set_training, c_model_set_training, BIT(MODEL)),
    ROW(kiln_model_is_training, c_model_is_training, BIT(MODEL)),
    ROW(kiln_model_num_parameters, c_model_num_parameters, BIT(MODEL)),
    ROW(kiln_model_input_size, c_model_input_size, BIT(MODEL)),
    ROW(kiln_model_output_size, c_model_output_size, BIT(MODEL)),
    ROW(kiln_model_describe, c_model_describe, BIT(MODEL)),
    ROW(kiln_model_num_parameter_tensors, c_model_num_parameter_tensors, BIT(MODEL)),
    ROW(kiln_model_parameter, c_model_parameter, BIT(MODEL)),
    ROW(kiln_model_parameter_name, c_model_parameter_name, BIT(MODEL)),
    ROW(kiln_model_forward, c_model_forward, BIT(MODEL) | BIT(TX)),
    ROW(kiln_model_predict, c_model_predict, BIT(MODEL) | BIT(TX)),
    ROW(kiln_model_save, c_model_save, BIT(MODEL)),
    ROW(kiln_model_load, c_model_load, BIT(CTX)),
    ROW(kiln_model_load_weights, c_model_load_weights, BIT(MODEL)),
    ROW(kiln_model_load_with_spec, c_model_load_with_spec, BIT(CTX) | BIT(SPEC)),
    ROW(kiln_model_export_onnx, c_model_export_onnx, BIT(MODEL)),
    ROW(kiln_model_export_onnx_v2, c_model_export_onnx_v2, BIT(MODEL)),
    ROW(kiln_model_import_onnx, c_model_import_onnx, BIT(CTX)),
    ROW(kiln_dataset_from_tensors, c_dataset_from_tensors, BIT(CTX) | BIT(TX) | BIT(TY)),
    ROW(kiln_dataset_load_idx, c_dataset_load_idx, BIT(CTX)),
    ROW(kiln_dataset_load_mnist, c_dataset_load_mnist, BIT(CTX)),
    ROW(kiln_dataset_retain, c_dataset_retain, BIT(DATASET)),
    ROW(kiln_dataset_size, c_dataset_size, BIT(DATASET)),
    ROW(kiln_dataset_num_features, c_dataset_num_features, BIT(DATASET)),
    ROW(kiln_dataset_num_classes, c_dataset_num_classes, BIT(DATASET)),
    ROW(kiln_dataset_set_normalization, c_dataset_set_normalization, BIT(DATASET)),
    ROW(kiln_dataset_split, c_dataset_split, BIT(DATASET)),
    ROW(kiln_dataset_batch, c_dataset_batch, BIT(DATASET)),
    ROW(kiln_loss, c_loss, BIT(TP) | BIT(TY)),
    ROW(kiln_trainer_options_set_loss, c_opt_set_loss, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_optimizer, c_opt_set_optimizer, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_lr, c_opt_set_lr, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_momentum, c_opt_set_momentum, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_nesterov, c_opt_set_nesterov, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_weight_decay, c_opt_set_weight_decay, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_betas, c_opt_set_betas, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_eps, c_opt_set_eps, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_batch_size, c_opt_set_batch_size, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_grad_clip, c_opt_set_grad_clip, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_schedule, c_opt_set_schedule, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_warmup, c_opt_set_warmup, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_shuffle_seed, c_opt_set_shuffle_seed, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_progress_interval, c_opt_set_progress_interval, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_devices, c_opt_set_devices, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_bucket_bytes, c_opt_set_bucket_bytes, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_label_smoothing, c_opt_set_label_smoothing, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_precision, c_opt_set_precision, BIT(OPTIONS)),
    ROW(kiln_trainer_options_set_fast_path, c_opt_set_fast_path, BIT(OPTIONS)),
    ROW(kiln_trainer_create, c_trainer_create, BIT(MODEL) | BIT(OPTIONS)),
    ROW(kiln_trainer_retain, c_trainer_retain, BIT(TRAINER)),
    ROW(kiln_trainer_step, c_trainer_step, BIT(TRAINER) | BIT(TX) | BIT(TY)),
    ROW(kiln_trainer_epoch, c_trainer_epoch, BIT(TRAINER) | BIT(DATASET)),
    ROW(kiln_trainer_fit, c_trainer_fit, BIT(TRAINER) | BIT(DATASET)),
    ROW(kiln_trainer_evaluate, c_trainer_evaluate, BIT(TRAINER) | BIT(DATASET)),
    ROW(kiln_trainer_epochs_done, c_trainer_epochs_done, BIT(TRAINER)),
    ROW(kiln_trainer_steps_done, c_trainer_steps_done, BIT(TRAINER)),
    ROW(kiln_trainer_current_lr, c_trainer_current_lr, BIT(TRAINER)),
    ROW(kiln_trainer_save_checkpoint, c_trainer_save_checkpoint, BIT(TRAINER)),
    ROW(kiln_trainer_load_checkpoint, c_trainer_load_checkpoint, BIT(TRAINER)),
    ROW(kiln_history_retain, c_history_retain, BIT(HISTORY)),
    ROW(kiln_history_size, c_history_size, BIT(HISTORY)),
    ROW(kiln_history_get, c_history_get, BIT(HISTORY)),
    ROW(kiln_communicator_create_mpi, c_comm_create_mpi, BIT(CTX)),
    ROW(kiln_communicator_create_local, c_comm_create_local, BIT(CTX)),
    ROW(kiln_communicator_retain, c_comm_retain, BIT(COMM)),
    ROW(kiln_communicator_rank, c_comm_rank, BIT(COMM)),
    ROW(kiln_communicator_size, c_comm_size, BIT(COMM)),
    ROW(kiln_communicator_local_rank, c_comm_local_rank, BIT(COMM)),
    ROW(kiln_communicator_set_timeout, c_comm_set_timeout, BIT(COMM)),
    ROW(kiln_trainer_attach_communicator, c_attach, BIT(TRAINER) | BIT(COMM)),
};
enum { N_ROWS = sizeof kRows / sizeof kRows[0] };

/* ---- one race -------------------------------------------------------------- */

enum { kMaxSeen = 4 };

typedef struct race {
  const row *r;
  world *w;
  atomic_int calls;         /* calls the caller thread has finished */
  atomic_int stop;          /* the main thread gives up waiting */
  kiln_status seen[kMaxSeen]; /* the statuses that came back, in order of first sight */
  int n_seen;
} race;

static void *caller(void *arg) {
  race *rc = arg;
  for (int i = 0; i < 1000000 && !atomic_load(&rc->stop); ++i) {
    const kiln_status s = rc->r->call(rc->w);
    int known = 0;
    for (int k = 0; k < rc->n_seen; ++k) known |= rc->seen[k] == s;
    if (!known && rc->n_seen < kMaxSeen) rc->seen[rc->n_seen++] = s;
    atomic_fetch_add(&rc->calls, 1);
    if (s == KILN_ERROR_INVALID_HANDLE) break;
  }
  return NULL;
}

/* Races r against the release of handle `target`, once. expected: what the
 * call returned twice before the race (a call may change what the next one
 * returns once, as attaching does). */
static void race_once(const row *r, int target, kiln_test_rng *rng) {
  world w;
  memset(&w, 0, sizeof w);
  for (int k = 0; k < N_HANDLES; ++k)
    if (r->uses & BIT(k)) need(&w, k);
  kiln_status expected[2];
  expected[0] = r->call(&w);
  expected[1] = r->call(&w);
  for (int e = 0; e < 2; ++e)
    if (expected[e] == KILN_ERROR_INVALID_HANDLE || expected[e] == KILN_ERROR_INTERNAL)
      fail_msg("%s: %s before any release: %s", r->name, kiln_status_name(expected[e]), kiln_last_error());

  race rc;
  memset(&rc, 0, sizeof rc);
  rc.r = r;
  rc.w = &w;
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, caller, &rc), 0);
  /* Release during a call: after the first has come back, a random while in. */
  while (atomic_load(&rc.calls) < 1) sched_yield();
  const int64_t spin = kiln_test_rng_below(rng, 20000);
  for (volatile int64_t i = 0; i < spin; ++i) {
  }
  release(target, w.h[target]); /* the caller thread goes on passing the released handle */
  assert_int_equal(pthread_join(thread, NULL), 0);

  for (int k = 0; k < rc.n_seen; ++k)
    if (rc.seen[k] != expected[0] && rc.seen[k] != expected[1] && rc.seen[k] != KILN_ERROR_INVALID_HANDLE)
      fail_msg("%s racing the release of its %s: %s (undisturbed it returns %s)", r->name, kHandleNames[target],
               kiln_status_name(rc.seen[k]), kiln_status_name(expected[0]));
  assert_true(rc.n_seen > 0 && rc.seen[rc.n_seen - 1] == KILN_ERROR_INVALID_HANDLE);
  /* The released handle stays invalid for every later call. */
  assert_int_equal(r->call(&w), KILN_ERROR_INVALID_HANDLE);
  w.h[target] = NULL;
  for (int k = N_HANDLES - 1; k >= 0; --k)
    if (w.h[k]) release(k, w.h[k]);
}

static int rounds(void) {
  const char *env = getenv("KILN_RACE_ROUNDS");
  const int n = env ? atoi(env) : 6;
  return n > 0 ? n : 6;
}

/* Whether this process can make a communicator (libkiln_dist.so and MPI). */
static int have_comm(void) {
  if (g_have_comm >= 0) return g_have_comm;
  kiln_context *ctx = new_context();
  kiln_communicator *comm = NULL;
  const kiln_status s = kiln_communicator_create_mpi(ctx, &comm);
  g_have_comm = s == KILN_OK;
  if (!g_have_comm) snprintf(g_no_comm, sizeof g_no_comm, "%s: %s", kiln_status_name(s), kiln_last_error());
  kiln_communicator_release(comm);
  kiln_context_release(ctx);
  return g_have_comm;
}

static void race_every_function(void **state) {
  (void)state;
  kiln_test_rng rng = kiln_test_rng_make(21);
  int raced = 0, skipped = 0;
  const char *only = getenv("KILN_RACE_ONLY");
  for (int i = 0; i < N_ROWS; ++i) {
    const row *r = &kRows[i];
    if (only && !strstr(r->name, only)) continue;
    /* create_mpi needs the plugin as much as the rows that take a communicator. */
    const int needs_comm = (r->uses & BIT(COMM)) || r->call == c_comm_create_mpi;
    if (needs_comm && !have_comm()) {
      print_message("skipped %s: no communicator (%s)\n", r->name, g_no_comm);
      ++skipped;
      continue;
    }
    const int n = (r->uses & BIT(COMM)) ? 20 * rounds() : rounds();
    for (int target = 0; target < N_HANDLES; ++target)
      if (r->uses & BIT(target))
        for (int round = 0; round < n; ++round) race_once(r, target, &rng);
    ++raced;
  }
  print_message("raced %d functions against the release of each handle they take (%d skipped)\n", raced, skipped);
}

static int setup(void **state) {
  (void)state;
  kiln_test_make_temp_dir(g_dir, sizeof g_dir);
  snprintf(g_model, sizeof g_model, "%s/model.safetensors", g_dir);
  snprintf(g_checkpoint, sizeof g_checkpoint, "%s/checkpoint.safetensors", g_dir);
  snprintf(g_onnx, sizeof g_onnx, "%s/model.onnx", g_dir);
  snprintf(g_out, sizeof g_out, "%s/out", g_dir);
  kiln_context *ctx = new_context();
  kiln_model *model = kiln_test_model(ctx, "4-3-2");
  kiln_trainer *trainer = new_trainer(model);
  assert_kiln_ok(kiln_model_save(model, g_model));
  assert_kiln_ok(kiln_trainer_save_checkpoint(trainer, g_checkpoint));
  /* NOT_SUPPORTED without the plugin: the import then says so every time. */
  const kiln_status exported = kiln_model_export_onnx(model, g_onnx);
  assert_true(exported == KILN_OK || exported == KILN_ERROR_NOT_SUPPORTED);
  kiln_trainer_release(trainer);
  kiln_model_release(model);
  g_dlpack_ctx = ctx;
  static const float v[4] = {1, 2, 3, 4};
  const int64_t shape[1] = {4};
  g_dlpack_source = kiln_test_tensor_f32(ctx, v, shape, 1, kCpu);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  kiln_tensor_release(g_dlpack_source);
  kiln_context_release(g_dlpack_ctx);
  kiln_test_remove_tree(g_dir);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--list") == 0) {
    for (int i = 0; i < N_ROWS; ++i) printf("%s\n", kRows[i].name);
    return 0;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(race_every_function)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
