/*
 * Fuzzes kiln_model_load_with_spec: a safetensors state_dict read under a
 * spec the caller gives. The input's first byte picks one of SPECS (so one
 * file is tried against layouts with and without biases, activations and
 * dropout that shift the parameter indices), the rest is the file. A
 * malformed file may only be refused with FORMAT, IO, SHAPE_MISMATCH or
 * DTYPE_MISMATCH; a model that loads must run a forward pass of the spec's
 * shapes.
 */
#include "fuzz_support.h" /* first: it defines _GNU_SOURCE */

static const struct {
  const char *text;
  int64_t in, out;
} SPECS[] = {
    {"4-3-2", 4, 2},
    {"4-3-2:gelu:dropout=0.5", 4, 2},
    {"2-3-2-1:tanh", 2, 1},
    {"linear(4,3,nobias);relu;linear(3,2)", 4, 2},
};
#define NUM_SPECS (sizeof SPECS / sizeof SPECS[0])

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static kiln_fuzz_file file;
  if (!file.path[0]) kiln_fuzz_file_open(&file, "kiln-fuzz-state-dict");
  kiln_fuzz_file_set(&file, data + 1, size - 1);
  kiln_context *ctx = kiln_fuzz_context();
  const kiln_device cpu = {KILN_DEVICE_CPU, -1};
  const size_t pick = data[0] % NUM_SPECS;

  kiln_model_spec *spec = NULL;
  if (kiln_model_spec_create(&spec) != KILN_OK || kiln_model_spec_parse(spec, SPECS[pick].text) != KILN_OK)
    kiln_fuzz_die(kiln_last_error());
  static const kiln_status allowed[] = {KILN_ERROR_FORMAT, KILN_ERROR_IO, KILN_ERROR_SHAPE_MISMATCH,
                                        KILN_ERROR_DTYPE_MISMATCH};
  kiln_model *model = NULL;
  kiln_status status = kiln_model_load_with_spec(ctx, file.path, spec, cpu, &model);
  kiln_fuzz_expect("kiln_model_load_with_spec", status, allowed, 4);
  if (status != KILN_OK) {
    if (model) kiln_fuzz_die("kiln_model_load_with_spec failed but left *out set");
  } else {
    kiln_fuzz_check_loaded_model(ctx, model, SPECS[pick].in, SPECS[pick].out);
  }
  kiln_model_spec_release(spec);
  return 0;
}
