/*
 * Fuzzes checkpoint loading, kiln_trainer_load_checkpoint, into trainers of
 * a fresh 4-3-2 model: one with SGD and momentum (a momentum buffer per
 * parameter), one with Adam (two state buffers and a step count). A
 * malformed checkpoint may only be refused with FORMAT, IO, SHAPE_MISMATCH,
 * DTYPE_MISMATCH or INVALID_ARGUMENT (another optimizer's checkpoint), and
 * must leave the trainer unchanged: same weights, no epochs or steps. A
 * checkpoint that loads must leave a trainer that can take a step, whatever
 * counters it held (issue 12 item 1: counters near INT64_MAX overflowed).
 */
#include "fuzz_support.h" /* first: it defines _GNU_SOURCE */

#include <string.h>

#define MODEL_SPEC "4-3-2"
#define MODEL_PARAMS 23 /* 4*3 + 3 + 3*2 + 2 */

static void load_into(const char *path, kiln_optimizer_kind kind, double momentum) {
  kiln_context *ctx = kiln_fuzz_context();
  const kiln_device cpu = {KILN_DEVICE_CPU, -1};
  kiln_model_spec *spec = NULL;
  kiln_model *model = NULL;
  kiln_trainer_options *options = NULL;
  kiln_trainer *trainer = NULL;
  if (kiln_model_spec_create(&spec) != KILN_OK || kiln_model_spec_parse(spec, MODEL_SPEC) != KILN_OK ||
      kiln_model_create(ctx, spec, cpu, &model) != KILN_OK || kiln_trainer_options_create(&options) != KILN_OK ||
      kiln_trainer_options_set_optimizer(options, kind) != KILN_OK ||
      kiln_trainer_options_set_momentum(options, momentum) != KILN_OK ||
      kiln_trainer_create(model, options, &trainer) != KILN_OK)
    kiln_fuzz_die(kiln_last_error());
  kiln_trainer_options_release(options);
  kiln_model_spec_release(spec);

  float before[MODEL_PARAMS], after[MODEL_PARAMS];
  kiln_fuzz_read_parameters(model, before, MODEL_PARAMS);
  static const kiln_status allowed[] = {KILN_ERROR_FORMAT, KILN_ERROR_IO, KILN_ERROR_SHAPE_MISMATCH,
                                        KILN_ERROR_DTYPE_MISMATCH, KILN_ERROR_INVALID_ARGUMENT};
  kiln_status status = kiln_trainer_load_checkpoint(trainer, path);
  kiln_fuzz_expect("kiln_trainer_load_checkpoint", status, allowed, 5);
  int64_t epochs = -1, steps = -1;
  if (kiln_trainer_epochs_done(trainer, &epochs) != KILN_OK || kiln_trainer_steps_done(trainer, &steps) != KILN_OK)
    kiln_fuzz_die(kiln_last_error());
  if (status != KILN_OK) {
    kiln_fuzz_read_parameters(model, after, MODEL_PARAMS);
    if (memcmp(before, after, sizeof before) != 0 || epochs != 0 || steps != 0)
      kiln_fuzz_die("a failed kiln_trainer_load_checkpoint changed the trainer");
  } else {
    if (epochs < 0 || steps < 0) kiln_fuzz_die("a loaded checkpoint gives negative counters");
    /* One step on a fixed batch: the counters must count on without overflow. */
    const float xs[8] = {1, 0, -1, 2, 0.5f, 0.25f, 0, -2};
    const int64_t labels[2] = {0, 1}, x_shape[2] = {2, 4}, y_shape[1] = {2};
    kiln_tensor *x = NULL, *y = NULL;
    double loss = 0;
    int64_t steps_after = -1;
    if (kiln_tensor_empty(ctx, x_shape, 2, KILN_F32, cpu, &x) != KILN_OK ||
        kiln_tensor_copy_from_host(x, xs, sizeof xs) != KILN_OK ||
        kiln_tensor_empty(ctx, y_shape, 1, KILN_I64, cpu, &y) != KILN_OK ||
        kiln_tensor_copy_from_host(y, labels, sizeof labels) != KILN_OK ||
        kiln_trainer_step(trainer, x, y, &loss) != KILN_OK || kiln_trainer_steps_done(trainer, &steps_after) != KILN_OK)
      kiln_fuzz_die(kiln_last_error());
    if (steps_after != steps + 1) kiln_fuzz_die("a step after a loaded checkpoint did not count");
    kiln_tensor_release(x);
    kiln_tensor_release(y);
  }
  kiln_trainer_release(trainer);
  kiln_model_release(model);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static kiln_fuzz_file file;
  if (!file.path[0]) kiln_fuzz_file_open(&file, "kiln-fuzz-checkpoint");
  kiln_fuzz_file_set(&file, data, size);
  load_into(file.path, KILN_OPTIM_SGD, 0.9);
  load_into(file.path, KILN_OPTIM_ADAM, 0.0);
  return 0;
}
