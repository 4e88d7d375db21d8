/* Writes two model files for safetensors_reader.py to check from outside:
 *   DIR/f32.safetensors  spec "3-4-2" (f32), DIR/f64.safetensors  spec "2-3" (f64)
 * with parameter i, element j set to (i + 1) * 0.25 + j * 0.5 - 1 (exact in
 * both dtypes). Usage: safetensors_writer DIR. Exits non-zero with kiln's
 * message on any failure. */
#include <stdio.h>
#include <stdlib.h>

#include "kiln/kiln.h"

static void check(kiln_status status, const char *what) {
  if (status == KILN_OK) return;
  fprintf(stderr, "%s: %s: %s\n", what, kiln_status_name(status), kiln_last_error());
  exit(1);
}

static void write_model(kiln_context *ctx, const char *spec_text, kiln_dtype dtype, const char *path) {
  const kiln_device cpu = {KILN_DEVICE_CPU, -1};
  kiln_model_spec *spec = NULL;
  kiln_model *model = NULL;
  check(kiln_model_spec_create(&spec), "spec");
  check(kiln_model_spec_parse(spec, spec_text), "spec parse");
  check(kiln_model_create_dtype(ctx, spec, cpu, dtype, &model), "model");
  kiln_model_spec_release(spec);
  int64_t count = 0;
  check(kiln_model_num_parameter_tensors(model, &count), "parameter count");
  for (int64_t i = 0; i < count; ++i) {
    kiln_tensor *p = NULL, *filled = NULL;
    int64_t n = 0;
    check(kiln_model_parameter(model, i, &p), "parameter");
    check(kiln_tensor_numel(p, &n), "numel");
    double *values = malloc((size_t)n * sizeof(double));
    if (!values) exit(1);
    for (int64_t j = 0; j < n; ++j) values[j] = (double)(i + 1) * 0.25 + (double)j * 0.5 - 1.0;
    int64_t shape[KILN_MAX_DIMS], ndim = 0;
    check(kiln_tensor_ndim(p, &ndim), "ndim");
    check(kiln_tensor_shape(p, shape, KILN_MAX_DIMS), "shape");
    check(kiln_tensor_from_host(ctx, values, n * 8, shape, ndim, KILN_F64, cpu, &filled), "from_host");
    free(values);
    kiln_tensor *cast = NULL;
    check(kiln_tensor_cast(filled, dtype, &cast), "cast");
    size_t bytes = (size_t)(n * kiln_dtype_size(dtype));
    void *host = malloc(bytes ? bytes : 1);
    if (!host) exit(1);
    check(kiln_tensor_copy_to_host(cast, host, (int64_t)bytes), "copy_to_host");
    check(kiln_tensor_copy_from_host(p, host, (int64_t)bytes), "copy_from_host");
    free(host);
    kiln_tensor_release(cast);
    kiln_tensor_release(filled);
    kiln_tensor_release(p);
  }
  check(kiln_model_save(model, path), "save");
  kiln_model_release(model);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  char path[4096];
  kiln_context *ctx = NULL;
  check(kiln_context_create(NULL, &ctx), "context");
  snprintf(path, sizeof path, "%s/f32.safetensors", argv[1]);
  write_model(ctx, "3-4-2", KILN_F32, path);
  snprintf(path, sizeof path, "%s/f64.safetensors", argv[1]);
  write_model(ctx, "2-3", KILN_F64, path);
  kiln_context_release(ctx);
  return 0;
}
