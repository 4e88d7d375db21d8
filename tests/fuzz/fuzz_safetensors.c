/*
 * Fuzzes the safetensors reader through kiln_model_load (a whole model from
 * an untrusted file) and kiln_model_load_weights (into an existing 4-3-2
 * model). A malformed file may only be rejected with FORMAT, IO or
 * SHAPE_MISMATCH (and DTYPE_MISMATCH for weights of the wrong dtype), and a
 * rejected kiln_model_load_weights must leave the model's weights unchanged.
 */
#include "fuzz_support.h" /* first: it defines _GNU_SOURCE */

#include <string.h>

#define WEIGHTS_MODEL_SPEC "4-3-2"
#define WEIGHTS_MODEL_PARAMS 23 /* 4*3 + 3 + 3*2 + 2 */

static kiln_model *weights_model(void) {
  static kiln_model *model;
  if (model) return model;
  kiln_model_spec *spec = NULL;
  kiln_device cpu = {KILN_DEVICE_CPU, -1};
  if (kiln_model_spec_create(&spec) != KILN_OK || kiln_model_spec_parse(spec, WEIGHTS_MODEL_SPEC) != KILN_OK ||
      kiln_model_create(kiln_fuzz_context(), spec, cpu, &model) != KILN_OK)
    kiln_fuzz_die(kiln_last_error());
  kiln_model_spec_release(spec);
  int64_t n = 0;
  if (kiln_model_num_parameters(model, &n) != KILN_OK || n != WEIGHTS_MODEL_PARAMS)
    kiln_fuzz_die("the weights model does not have " WEIGHTS_MODEL_SPEC "'s parameter count");
  return model;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static kiln_fuzz_file file;
  if (!file.path[0]) kiln_fuzz_file_open(&file, "kiln-fuzz-safetensors");
  kiln_fuzz_file_set(&file, data, size);
  kiln_context *ctx = kiln_fuzz_context();

  static const kiln_status load_allowed[] = {KILN_ERROR_FORMAT, KILN_ERROR_IO, KILN_ERROR_SHAPE_MISMATCH};
  kiln_device cpu = {KILN_DEVICE_CPU, -1};
  kiln_model *loaded = NULL;
  kiln_status status = kiln_model_load(ctx, file.path, cpu, &loaded);
  kiln_fuzz_expect("kiln_model_load", status, load_allowed, 3);
  if (status == KILN_OK) {
    const char *description = NULL;
    if (kiln_model_describe(loaded, &description) != KILN_OK || !description)
      kiln_fuzz_die("a loaded model cannot describe itself");
    kiln_model_release(loaded);
  } else if (loaded) {
    kiln_fuzz_die("kiln_model_load failed but left *out set");
  }

  static const kiln_status weights_allowed[] = {KILN_ERROR_FORMAT, KILN_ERROR_IO, KILN_ERROR_SHAPE_MISMATCH,
                                                KILN_ERROR_DTYPE_MISMATCH};
  kiln_model *model = weights_model();
  float before[WEIGHTS_MODEL_PARAMS], after[WEIGHTS_MODEL_PARAMS];
  kiln_fuzz_read_parameters(model, before, WEIGHTS_MODEL_PARAMS);
  status = kiln_model_load_weights(model, file.path);
  kiln_fuzz_expect("kiln_model_load_weights", status, weights_allowed, 4);
  if (status != KILN_OK) {
    kiln_fuzz_read_parameters(model, after, WEIGHTS_MODEL_PARAMS);
    if (memcmp(before, after, sizeof before) != 0) kiln_fuzz_die("a failed kiln_model_load_weights changed the weights");
  }
  return 0;
}
