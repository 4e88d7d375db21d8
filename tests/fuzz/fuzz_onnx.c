/*
 * Fuzzes the ONNX reader through kiln_model_import_onnx (protobuf parsing
 * and the graph walk live in the plugin libkiln_onnx.so). A malformed or
 * unsupported file may only be rejected with FORMAT, IO or NOT_SUPPORTED,
 * must leave *out NULL, and a model that is accepted must describe itself
 * and run a forward pass.
 *
 * The input is written as model.onnx into a folder of its own, beside
 * "data.bin" (256 bytes: 64 floats) and "escape.bin" (a symbolic link to a
 * file outside the folder), so that external data references (location,
 * offset, length, checksum) reach the reads, the range checks and the path
 * checks.
 */
#include "fuzz_support.h" /* first: it defines _GNU_SOURCE */

#include <sys/stat.h>

static char g_dir[64], g_model[96], g_data[96], g_escape[96];

static void remove_folder(void) {
  unlink(g_model);
  unlink(g_data);
  unlink(g_escape);
  rmdir(g_dir);
}

static void write_all(const char *path, const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) kiln_fuzz_die("cannot write the fuzz folder");
}

static void make_folder(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/kiln-fuzz-onnx-XXXXXX");
  if (!mkdtemp(g_dir)) kiln_fuzz_die("mkdtemp failed");
  snprintf(g_model, sizeof g_model, "%s/model.onnx", g_dir);
  snprintf(g_data, sizeof g_data, "%s/data.bin", g_dir);
  snprintf(g_escape, sizeof g_escape, "%s/escape.bin", g_dir);
  float values[64];
  for (int i = 0; i < 64; ++i) values[i] = 0.1f * (float)((i % 7) - 3);
  write_all(g_data, (const uint8_t *)values, sizeof values);
  if (symlink("/proc/self/exe", g_escape) != 0) kiln_fuzz_die("symlink failed");
  atexit(remove_folder);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_dir[0]) make_folder();
  write_all(g_model, data, size);
  kiln_context *ctx = kiln_fuzz_context();

  static const kiln_status allowed[] = {KILN_ERROR_FORMAT, KILN_ERROR_IO, KILN_ERROR_NOT_SUPPORTED};
  kiln_model *model = NULL;
  const kiln_status status = kiln_model_import_onnx(ctx, g_model, &model);
  kiln_fuzz_expect("kiln_model_import_onnx", status, allowed, 3);
  if (status != KILN_OK) {
    if (model) kiln_fuzz_die("kiln_model_import_onnx failed but left *out set");
    return 0;
  }
  const char *description = NULL;
  int64_t inputs = 0;
  if (kiln_model_describe(model, &description) != KILN_OK || !description ||
      kiln_model_input_size(model, &inputs) != KILN_OK || inputs < 1)
    kiln_fuzz_die("an imported model cannot describe itself");
  /* One row of zeros through the model: its layers must fit together. A
   * model without a Linear may be as wide as its input says (up to 2^30
   * features); the row is left out past 2^20, to stay in a fuzzer's memory. */
  if (inputs > (1 << 20)) {
    kiln_model_release(model);
    return 0;
  }
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
