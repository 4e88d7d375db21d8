/* A helper for tests/torch_state_dict.py: writes kiln model files and prints
 * a model's logits exactly, so Python can compare them with PyTorch's.
 *
 *   state_dict_tool save SPEC SEED PATH
 *       creates a model of SPEC (e.g. "4-16-3", f32, CPU) from a context
 *       seeded with SEED and saves it with kiln_model_save.
 *   state_dict_tool logits PATH SPEC|- ROWS INPUT OUTPUT
 *       loads PATH (kiln_model_load for "-", else kiln_model_load_with_spec),
 *       runs it in evaluation mode on ROWS rows of little-endian f64 inputs
 *       read from INPUT and writes the logits as little-endian f64 to OUTPUT.
 *
 * Exit status 0 on success, 1 with kiln's message on stderr otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"

static int fail(const char *what) {
  fprintf(stderr, "state_dict_tool: %s: %s\n", what, kiln_last_error());
  return 1;
}

static int save(const char *spec_text, const char *seed, const char *path) {
  kiln_context_options *options = NULL;
  kiln_context *ctx = NULL;
  kiln_model_spec *spec = NULL;
  kiln_model *model = NULL;
  const kiln_device cpu = {KILN_DEVICE_CPU, -1};
  int rc = 0;
  if (kiln_context_options_create(&options) != KILN_OK ||
      kiln_context_options_set_seed(options, strtoull(seed, NULL, 10)) != KILN_OK ||
      kiln_context_options_set_enable_cuda(options, 0) != KILN_OK || kiln_context_create(options, &ctx) != KILN_OK)
    rc = fail("cannot create a context");
  if (!rc && (kiln_model_spec_create(&spec) != KILN_OK || kiln_model_spec_parse(spec, spec_text) != KILN_OK))
    rc = fail("bad spec");
  if (!rc && kiln_model_create(ctx, spec, cpu, &model) != KILN_OK) rc = fail("cannot create the model");
  if (!rc && kiln_model_save(model, path) != KILN_OK) rc = fail("cannot save");
  kiln_model_release(model);
  kiln_model_spec_release(spec);
  kiln_context_release(ctx);
  kiln_context_options_release(options);
  return rc;
}

static int logits(const char *path, const char *spec_text, const char *rows_text, const char *input,
                  const char *output) {
  kiln_context *ctx = NULL;
  kiln_model_spec *spec = NULL;
  kiln_model *model = NULL;
  kiln_tensor *y = NULL, *y64 = NULL;
  const kiln_device cpu = {KILN_DEVICE_CPU, -1};
  const int64_t rows = strtoll(rows_text, NULL, 10);
  int64_t in = 0, out = 0;
  double *xs = NULL, *ys = NULL;
  int rc = 0;
  if (kiln_context_create(NULL, &ctx) != KILN_OK) rc = fail("cannot create a context");
  if (!rc && strcmp(spec_text, "-") == 0) {
    if (kiln_model_load(ctx, path, cpu, &model) != KILN_OK) rc = fail("kiln_model_load");
  } else if (!rc) {
    if (kiln_model_spec_create(&spec) != KILN_OK || kiln_model_spec_parse(spec, spec_text) != KILN_OK)
      rc = fail("bad spec");
    else if (kiln_model_load_with_spec(ctx, path, spec, cpu, &model) != KILN_OK)
      rc = fail("kiln_model_load_with_spec");
  }
  if (!rc && (kiln_model_input_size(model, &in) != KILN_OK || kiln_model_output_size(model, &out) != KILN_OK ||
              kiln_model_set_training(model, 0) != KILN_OK))
    rc = fail("model queries");
  if (!rc) {
    xs = malloc((size_t)(rows * in) * sizeof *xs);
    ys = malloc((size_t)(rows * out) * sizeof *ys);
    FILE *fp = fopen(input, "rb");
    if (!xs || !ys || !fp || fread(xs, sizeof *xs, (size_t)(rows * in), fp) != (size_t)(rows * in)) {
      fprintf(stderr, "state_dict_tool: cannot read %lld x %lld inputs from %s\n", (long long)rows, (long long)in,
              input);
      rc = 1;
    }
    if (fp) fclose(fp);
  }
  /* f64 inputs, which the model converts to its dtype (f32, or f64 for an
   * f64 model), as an f32 input would be. */
  const int64_t shape[2] = {rows, in};
  kiln_tensor *x64 = NULL;
  if (!rc && (kiln_tensor_from_host(ctx, xs, rows * in * 8, shape, 2, KILN_F64, cpu, &x64) != KILN_OK ||
              kiln_model_forward(model, x64, &y) != KILN_OK ||
              kiln_tensor_cast(y, KILN_F64, &y64) != KILN_OK ||
              kiln_tensor_copy_to_host(y64, ys, rows * out * 8) != KILN_OK))
    rc = fail("forward");
  if (!rc) {
    FILE *fp = fopen(output, "wb");
    if (!fp || fwrite(ys, sizeof *ys, (size_t)(rows * out), fp) != (size_t)(rows * out)) {
      fprintf(stderr, "state_dict_tool: cannot write %s\n", output);
      rc = 1;
    }
    if (fp && fclose(fp) != 0) rc = 1;
  }
  free(xs);
  free(ys);
  kiln_tensor_release(x64);
  kiln_tensor_release(y64);
  kiln_tensor_release(y);
  kiln_model_release(model);
  kiln_model_spec_release(spec);
  kiln_context_release(ctx);
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "save") == 0) return save(argv[2], argv[3], argv[4]);
  if (argc == 7 && strcmp(argv[1], "logits") == 0) return logits(argv[2], argv[3], argv[4], argv[5], argv[6]);
  fprintf(stderr,
          "usage: state_dict_tool save SPEC SEED PATH\n"
          "       state_dict_tool logits PATH SPEC|- ROWS INPUT OUTPUT\n");
  return 2;
}
