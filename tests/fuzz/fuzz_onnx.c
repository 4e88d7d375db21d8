/*
 * Fuzzes the ONNX reader through kiln_model_import_onnx (protobuf parsing
 * and the graph walk live in the plugin libkiln_onnx.so). A malformed or
 * unsupported file may only be rejected with FORMAT or NOT_SUPPORTED, must
 * leave *out NULL, and a model that is accepted must describe itself and run
 * a forward pass.
 */
#include "fuzz_support.h" /* first: it defines _GNU_SOURCE */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static kiln_fuzz_file file;
  if (!file.path[0]) kiln_fuzz_file_open(&file, "kiln-fuzz-onnx");
  kiln_fuzz_file_set(&file, data, size);
  kiln_context *ctx = kiln_fuzz_context();

  static const kiln_status allowed[] = {KILN_ERROR_FORMAT, KILN_ERROR_NOT_SUPPORTED};
  kiln_model *model = NULL;
  const kiln_status status = kiln_model_import_onnx(ctx, file.path, &model);
  kiln_fuzz_expect("kiln_model_import_onnx", status, allowed, 2);
  if (status != KILN_OK) {
    if (model) kiln_fuzz_die("kiln_model_import_onnx failed but left *out set");
    return 0;
  }
  const char *description = NULL;
  int64_t inputs = 0;
  if (kiln_model_describe(model, &description) != KILN_OK || !description ||
      kiln_model_input_size(model, &inputs) != KILN_OK || inputs < 1)
    kiln_fuzz_die("an imported model cannot describe itself");
  /* One row of zeros through the model: its layers must fit together. */
  const int64_t shape[2] = {1, inputs};
  const kiln_device cpu = {KILN_DEVICE_CPU, -1};
  kiln_tensor *x = NULL, *y = NULL;
  if (kiln_tensor_zeros(ctx, shape, 2, KILN_F32, cpu, &x) != KILN_OK ||
      kiln_model_predict(model, x, KILN_PREDICT_LOGITS, &y) != KILN_OK)
    kiln_fuzz_die(kiln_last_error());
  kiln_tensor_release(y);
  kiln_tensor_release(x);
  kiln_model_release(model);
  return 0;
}
