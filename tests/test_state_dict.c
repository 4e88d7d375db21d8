/* kiln_model_load_with_spec: safetensors files without kiln's metadata, laid
 * out as PyTorch's nn.Sequential state_dict ("0.weight" [out, in], "0.bias",
 * "2.weight", ...), as safetensors.torch.save_file writes them. The files
 * are written byte by byte here (8-byte little-endian header length, JSON
 * header, raw little-endian data), for a 4-3-2 MLP. Covers: the values and
 * the logits, f64 files, kiln's own files, every mismatch naming the
 * offending tensor, malformed and hostile files (FORMAT, never a crash),
 * argument and handle errors.
 *
 * Then torch.save files of the same MLP through the same entry points
 * (kiln_model_load_with_spec, kiln_model_load_weights, and kiln_model_load's
 * message): the committed fixtures of tests/torch_fixtures/, written by
 * PyTorch (plain, f64, shared and strided storages, big-endian, deflated,
 * zip64, Parameters in protocol 5, with a Flatten), what the messages say
 * about state_dicts that do not fit (the layers they hold, the spec that
 * fits) and refusals as the C API reports them. torch_file_test.cpp covers
 * the reader's dtypes and refusals in detail; tests/torch_state_dict.py
 * checks both formats against real PyTorch when it is installed. */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};

typedef kiln_test_file_fixture fixture;

static int setup(void **state) {
  *state = kiln_test_file_fixture_create("state_dict.safetensors");
  return 0;
}

static int teardown(void **state) {
  kiln_test_file_fixture_destroy(*state);
  return 0;
}

/* One tensor of a hand-written file. Its values are value(i) = (k + 1) *
 * 0.1 * ((i % 7) - 3) for the k-th tensor, in its dtype. */
typedef struct {
  const char *name;
  const char *dtype; /* "F32", "F64", "F16", "BF16" (F16 and BF16 hold 1.0 everywhere) */
  int64_t shape[2];
  int ndim;
} entry;

static double value(int k, int64_t i) { return (k + 1) * 0.1 * (double)((i % 7) - 3); }

static int64_t numel(const entry *e) {
  int64_t n = 1;
  for (int d = 0; d < e->ndim; ++d) n *= e->shape[d];
  return n;
}

static size_t elem_size(const char *dtype) {
  return strcmp(dtype, "F64") == 0 ? 8 : strcmp(dtype, "F16") == 0 || strcmp(dtype, "BF16") == 0 ? 2 : 4;
}

/* The 4-3-2 MLP's state_dict, all f32. */
static const entry MLP[4] = {
    {"0.weight", "F32", {3, 4}, 2}, {"0.bias", "F32", {3}, 1}, {"2.weight", "F32", {2, 3}, 2}, {"2.bias", "F32", {2}, 1}};

/* Writes a safetensors file of the n entries, with metadata {"format":"pt"}
 * as PyTorch's writer adds. truncate > 0 drops that many bytes from the end. */
static void write_state_dict(const char *path, const entry *entries, int n, size_t truncate) {
  char header[4096];
  size_t len = (size_t)snprintf(header, sizeof header, "{\"__metadata__\":{\"format\":\"pt\"}");
  size_t offset = 0;
  for (int k = 0; k < n; ++k) {
    const entry *e = &entries[k];
    size_t bytes = (size_t)numel(e) * elem_size(e->dtype);
    len += (size_t)snprintf(header + len, sizeof header - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", e->name,
                            e->dtype);
    for (int d = 0; d < e->ndim; ++d)
      len += (size_t)snprintf(header + len, sizeof header - len, "%s%lld", d ? "," : "", (long long)e->shape[d]);
    len += (size_t)snprintf(header + len, sizeof header - len, "],\"data_offsets\":[%zu,%zu]}", offset,
                            offset + bytes);
    offset += bytes;
  }
  len += (size_t)snprintf(header + len, sizeof header - len, "}");
  while (len % 8) header[len++] = ' '; /* the writers pad to 8 bytes */

  size_t total = 8 + len + offset;
  unsigned char *buf = calloc(1, total);
  assert_non_null(buf);
  for (int i = 0; i < 8; ++i) buf[i] = (unsigned char)((uint64_t)len >> (8 * i));
  memcpy(buf + 8, header, len);
  unsigned char *p = buf + 8 + len;
  for (int k = 0; k < n; ++k) {
    const entry *e = &entries[k];
    for (int64_t i = 0; i < numel(e); ++i) {
      if (strcmp(e->dtype, "F64") == 0) {
        double v = value(k, i);
        memcpy(p, &v, 8); /* little-endian host, as the tests' machines */
        p += 8;
      } else if (strcmp(e->dtype, "F16") == 0 || strcmp(e->dtype, "BF16") == 0) {
        const int bf16 = e->dtype[0] == 'B';
        p[0] = bf16 ? 0x80 : 0;
        p[1] = bf16 ? 0x3f : 0x3c; /* 1.0 */
        p += 2;
      } else {
        float v = (float)value(k, i);
        memcpy(p, &v, 4);
        p += 4;
      }
    }
  }
  assert_true(truncate < total);
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(buf, 1, total - truncate, fp), total - truncate);
  assert_int_equal(fclose(fp), 0);
  free(buf);
}

/* Writes raw bytes (for hostile files). */
static void write_raw(const char *path, const void *data, size_t size) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  if (size) assert_int_equal(fwrite(data, 1, size, fp), size);
  assert_int_equal(fclose(fp), 0);
}

static kiln_model_spec *spec_of(const char *text) {
  kiln_model_spec *spec = NULL;
  assert_kiln_ok(kiln_model_spec_create(&spec));
  assert_kiln_ok(kiln_model_spec_parse(spec, text));
  return spec;
}

/* Loads path with spec text; returns the status, *out the model or NULL. */
static kiln_status load(fixture *f, const char *spec_text, kiln_model **out) {
  kiln_model_spec *spec = spec_of(spec_text);
  *out = (kiln_model *)(uintptr_t)1; /* must be cleared on failure */
  kiln_status st = kiln_model_load_with_spec(f->ctx, f->path, spec, cpu, out);
  kiln_model_spec_release(spec);
  if (st != KILN_OK) assert_null(*out);
  return st;
}

/* The 4-3-2 ReLU MLP's logits for x [2, 4] by hand from the value() pattern. */
static void reference_logits(const double x[8], double logits[4]) {
  for (int b = 0; b < 2; ++b) {
    double h[3];
    for (int o = 0; o < 3; ++o) {
      double s = value(1, o);
      for (int i = 0; i < 4; ++i) s += value(0, o * 4 + i) * x[b * 4 + i];
      h[o] = s > 0 ? s : 0;
    }
    for (int o = 0; o < 2; ++o) {
      double s = value(3, o);
      for (int i = 0; i < 3; ++i) s += value(2, o * 3 + i) * h[i];
      logits[b * 2 + o] = s;
    }
  }
}

static const double X[8] = {0.5, -1.0, 2.0, 0.25, -0.75, 1.5, 0.125, -2.0};

static void check_logits(fixture *f, kiln_model *model, kiln_dtype dtype, double tol) {
  kiln_tensor *x = NULL, *y = NULL;
  const int64_t shape[2] = {2, 4};
  if (dtype == KILN_F64) {
    x = kiln_test_tensor_f64(f->ctx, X, shape, 2, cpu);
  } else {
    float xf[8];
    for (int i = 0; i < 8; ++i) xf[i] = (float)X[i];
    x = kiln_test_tensor_f32(f->ctx, xf, shape, 2, cpu);
  }
  assert_kiln_ok(kiln_model_set_training(model, 0));
  assert_kiln_ok(kiln_model_forward(model, x, &y));
  double want[4];
  reference_logits(X, want);
  assert_tensor_close(y, want, 4, tol, tol);
  kiln_tensor_release(y);
  kiln_tensor_release(x);
}

static void loads_pytorch_layout(void **state) {
  fixture *f = *state;
  write_state_dict(f->path, MLP, 4, 0);
  kiln_model *model = NULL;
  assert_kiln_ok(load(f, "4-3-2", &model));
  int64_t n = 0, tensors = 0;
  assert_kiln_ok(kiln_model_num_parameters(model, &n));
  assert_int_equal(n, 12 + 3 + 6 + 2);
  assert_kiln_ok(kiln_model_num_parameter_tensors(model, &tensors));
  assert_int_equal(tensors, 4);
  /* Each parameter holds the file's values under the file's name. */
  for (int k = 0; k < 4; ++k) {
    const char *name = NULL;
    kiln_tensor *p = NULL;
    kiln_dtype dtype;
    assert_kiln_ok(kiln_model_parameter_name(model, k, &name));
    assert_string_equal(name, MLP[k].name);
    assert_kiln_ok(kiln_model_parameter(model, k, &p));
    assert_kiln_ok(kiln_tensor_dtype(p, &dtype));
    assert_int_equal(dtype, KILN_F32);
    double want[12];
    for (int64_t i = 0; i < numel(&MLP[k]); ++i) want[i] = (float)value(k, i);
    assert_tensor_close(p, want, numel(&MLP[k]), 0, 0);
    kiln_tensor_release(p);
  }
  check_logits(f, model, KILN_F32, 1e-6);
  /* The spec, not the file, decides the activations. */
  const char *described = NULL;
  assert_kiln_ok(kiln_model_describe(model, &described));
  assert_non_null(strstr(described, "4-3-2"));
  kiln_model_release(model);
  /* Without kiln's metadata, kiln_model_load still refuses the file. */
  assert_status(kiln_model_load(f->ctx, f->path, cpu, &model), KILN_ERROR_FORMAT);
  assert_null(model);
}

static void loads_f64(void **state) {
  fixture *f = *state;
  entry e[4];
  memcpy(e, MLP, sizeof e);
  for (int k = 0; k < 4; ++k) e[k].dtype = "F64";
  write_state_dict(f->path, e, 4, 0);
  kiln_model *model = NULL;
  assert_kiln_ok(load(f, "4-3-2", &model));
  kiln_tensor *p = NULL;
  kiln_dtype dtype;
  assert_kiln_ok(kiln_model_parameter(model, 0, &p));
  assert_kiln_ok(kiln_tensor_dtype(p, &dtype));
  assert_int_equal(dtype, KILN_F64);
  kiln_tensor_release(p);
  check_logits(f, model, KILN_F64, 1e-12);
  kiln_model_release(model);
}

/* A file kiln_model_save wrote loads with a spec too, and still without. */
static void loads_kiln_files(void **state) {
  fixture *f = *state;
  kiln_model_spec *spec = spec_of("4-3-2");
  kiln_model *saved = NULL, *plain = NULL, *with_spec = NULL;
  assert_kiln_ok(kiln_model_create(f->ctx, spec, cpu, &saved));
  assert_kiln_ok(kiln_model_save(saved, f->path));
  assert_kiln_ok(kiln_model_load(f->ctx, f->path, cpu, &plain));
  assert_kiln_ok(kiln_model_load_with_spec(f->ctx, f->path, spec, cpu, &with_spec));
  const int64_t shape[2] = {2, 4};
  float xf[8];
  for (int i = 0; i < 8; ++i) xf[i] = (float)X[i];
  kiln_tensor *x = kiln_test_tensor_f32(f->ctx, xf, shape, 2, cpu);
  kiln_model *models[3] = {saved, plain, with_spec};
  double logits[3][4];
  for (int m = 0; m < 3; ++m) {
    kiln_tensor *y = NULL;
    assert_kiln_ok(kiln_model_set_training(models[m], 0));
    assert_kiln_ok(kiln_model_forward(models[m], x, &y));
    kiln_test_read_f64(y, logits[m], 4);
    kiln_tensor_release(y);
  }
  assert_allclose(logits[1], logits[0], 4, 0, 0);
  assert_allclose(logits[2], logits[0], 4, 0, 0);
  kiln_tensor_release(x);
  kiln_model_release(with_spec);
  kiln_model_release(plain);
  kiln_model_release(saved);
  kiln_model_spec_release(spec);
}

static void missing_key(void **state) {
  fixture *f = *state;
  write_state_dict(f->path, MLP, 3, 0); /* no "2.bias" */
  kiln_model *model = NULL;
  assert_status(load(f, "4-3-2", &model), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("\"2.bias\"");
  /* Names of another layout (a module with attributes) are refused by name. */
  entry e[4];
  memcpy(e, MLP, sizeof e);
  e[0].name = "fc1.weight";
  write_state_dict(f->path, e, 4, 0);
  assert_status(load(f, "4-3-2", &model), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("\"0.weight\"");
}

static void extra_key(void **state) {
  fixture *f = *state;
  entry e[5];
  memcpy(e, MLP, sizeof MLP);
  e[4] = (entry){"4.weight", "F32", {2, 2}, 2};
  write_state_dict(f->path, e, 5, 0);
  kiln_model *model = NULL;
  assert_status(load(f, "4-3-2", &model), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("\"4.weight\"");
  /* A spec with fewer layers than the file: the rest are extra. */
  write_state_dict(f->path, MLP, 4, 0);
  assert_status(load(f, "4-3", &model), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("\"2.weight\", \"2.bias\"");
}

static void wrong_shape(void **state) {
  fixture *f = *state;
  entry e[4];
  memcpy(e, MLP, sizeof e);
  e[0].shape[0] = 4; /* [4, 3]: the transpose, as a Keras-style layout */
  e[0].shape[1] = 3;
  write_state_dict(f->path, e, 4, 0);
  kiln_model *model = NULL;
  assert_status(load(f, "4-3-2", &model), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("\"0.weight\" has shape [4, 3]");
  /* The right file against a spec of other sizes. */
  write_state_dict(f->path, MLP, 4, 0);
  assert_status(load(f, "4-5-2", &model), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("\"0.weight\"");
}

/* f16 and bf16 tensors widen exactly into an f32 model, as PyTorch's
 * load_state_dict copies them (by load_with_spec and load_weights, and when
 * the first tensor is one, the model is f32); a tensor that would narrow
 * (f64 into f32) is DTYPE_MISMATCH, the model's weights unchanged. */
static void wrong_dtype(void **state) {
  fixture *f = *state;
  entry e[4];
  const char *const halves[] = {"F16", "BF16"};
  for (int h = 0; h < 2; ++h) {
    memcpy(e, MLP, sizeof e);
    e[0].dtype = halves[h];
    e[3].dtype = halves[h];
    write_state_dict(f->path, e, 4, 0);
    kiln_model *model = NULL;
    assert_kiln_ok(load(f, "4-3-2", &model));
    for (int k = 0; k < 4; ++k) {
      kiln_tensor *p = NULL;
      kiln_dtype dtype = KILN_F64;
      assert_kiln_ok(kiln_model_parameter(model, k, &p));
      assert_kiln_ok(kiln_tensor_dtype(p, &dtype));
      assert_int_equal(dtype, KILN_F32);
      double want[12];
      for (int64_t i = 0; i < numel(&MLP[k]); ++i) want[i] = k == 0 || k == 3 ? 1.0 : (float)value(k, i);
      assert_tensor_close(p, want, numel(&MLP[k]), 0, 0);
      kiln_tensor_release(p);
    }
    /* The same file into a model that has other weights. */
    write_state_dict(f->path, MLP, 4, 0);
    kiln_model *other = NULL;
    assert_kiln_ok(load(f, "4-3-2", &other));
    write_state_dict(f->path, e, 4, 0);
    assert_kiln_ok(kiln_model_load_weights(other, f->path));
    kiln_tensor *p = NULL;
    const double ones[2] = {1.0, 1.0};
    assert_kiln_ok(kiln_model_parameter(other, 3, &p));
    assert_tensor_close(p, ones, 2, 0, 0);
    kiln_tensor_release(p);
    kiln_model_release(other);
    kiln_model_release(model);
  }
  /* Mixed f32 / f64: the model is f32, and 2.bias would narrow. */
  memcpy(e, MLP, sizeof e);
  e[3].dtype = "F64";
  write_state_dict(f->path, e, 4, 0);
  kiln_model *model = NULL;
  assert_status(load(f, "4-3-2", &model), KILN_ERROR_DTYPE_MISMATCH);
  assert_last_error_contains("parameter \"2.bias\" is f64 in");
  assert_last_error_contains(
      "but the model is f32 (kiln widens f16 and bf16 to f32 and f64, and f32 to f64, but "
      "never narrows)");
  /* And into an existing f32 model, whose weights stay. */
  write_state_dict(f->path, MLP, 4, 0);
  assert_kiln_ok(load(f, "4-3-2", &model));
  write_state_dict(f->path, e, 4, 0);
  assert_status(kiln_model_load_weights(model, f->path), KILN_ERROR_DTYPE_MISMATCH);
  check_logits(f, model, KILN_F32, 1e-6);
  kiln_model_release(model);
}

static void malformed_files(void **state) {
  fixture *f = *state;
  kiln_model *model = NULL;
  /* Truncated data, by one byte and by everything after the header. */
  write_state_dict(f->path, MLP, 4, 1);
  assert_status(load(f, "4-3-2", &model), KILN_ERROR_FORMAT);
  write_state_dict(f->path, MLP, 4, 23 * 4);
  assert_status(load(f, "4-3-2", &model), KILN_ERROR_FORMAT);
  /* Empty, shorter than the length field, a header length past the end, a
   * huge header length, JSON that is not an object, offsets past the data. */
  write_raw(f->path, "", 0);
  assert_status(load(f, "4-3-2", &model), KILN_ERROR_FORMAT);
  write_raw(f->path, "\x10\x00\x00", 3);
  assert_status(load(f, "4-3-2", &model), KILN_ERROR_FORMAT);
  write_raw(f->path, "\xff\x00\x00\x00\x00\x00\x00\x00{}", 10);
  assert_status(load(f, "4-3-2", &model), KILN_ERROR_FORMAT);
  write_raw(f->path, "\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10);
  assert_status(load(f, "4-3-2", &model), KILN_ERROR_FORMAT);
  write_raw(f->path, "\x08\x00\x00\x00\x00\x00\x00\x00[1,2,3]\x20", 16);
  assert_status(load(f, "4-3-2", &model), KILN_ERROR_FORMAT);
  const char bad_offsets[] = "{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,4800000000]}}";
  unsigned char buf[256] = {0};
  buf[0] = (unsigned char)(sizeof bad_offsets - 1);
  memcpy(buf + 8, bad_offsets, sizeof bad_offsets - 1);
  write_raw(f->path, buf, 8 + sizeof bad_offsets - 1 + 48);
  assert_status(load(f, "4-3-2", &model), KILN_ERROR_FORMAT);
  /* A shape whose size overflows. */
  const char huge[] =
      "{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,48]}}";
  memset(buf, 0, sizeof buf);
  buf[0] = (unsigned char)(sizeof huge - 1);
  memcpy(buf + 8, huge, sizeof huge - 1);
  write_raw(f->path, buf, 8 + sizeof huge - 1 + 48);
  assert_status(load(f, "4-3-2", &model), KILN_ERROR_FORMAT);
  /* A file that is not there. */
  snprintf(f->path, sizeof f->path, "%s/missing.safetensors", f->dir);
  assert_status(load(f, "4-3-2", &model), KILN_ERROR_IO);
}

/* ---- torch.save files ---------------------------------------------------- */

/* Loads the fixture `name` with spec text into *out; returns the status. */
static kiln_status load_torch(fixture *f, const char *name, const char *spec_text, kiln_model **out) {
  snprintf(f->path, sizeof f->path, "%s/%s", KILN_TORCH_FIXTURES, name);
  return load(f, spec_text, out);
}

/* Each of these files holds the 4-3-2 MLP of value() as PyTorch saved it. */
static void loads_torch_save_files(void **state) {
  fixture *f = *state;
  static const char *const files[] = {
      "mlp.pt",          "mlp_shared.pt",        "mlp_big_endian.pt",   "mlp_deflated.pt",
      "mlp_zip64.pt",    "mlp_parameters_p5.pt", "mlp_no_byteorder.pt", "mlp_no_crc32.pt",
      "mlp_protocol1.pt"};
  for (size_t n = 0; n < sizeof files / sizeof files[0]; ++n) {
    print_message("torch.save file %s\n", files[n]);
    kiln_model *model = NULL;
    assert_kiln_ok(load_torch(f, files[n], "4-3-2", &model));
    for (int k = 0; k < 4; ++k) {
      const char *name = NULL;
      kiln_tensor *p = NULL;
      assert_kiln_ok(kiln_model_parameter_name(model, k, &name));
      assert_string_equal(name, MLP[k].name);
      assert_kiln_ok(kiln_model_parameter(model, k, &p));
      double want[12];
      for (int64_t i = 0; i < numel(&MLP[k]); ++i) want[i] = (float)value(k, i);
      assert_tensor_close(p, want, numel(&MLP[k]), 0, 0);
      kiln_tensor_release(p);
    }
    check_logits(f, model, KILN_F32, 1e-6);
    kiln_model_release(model);
  }
  kiln_model *model = NULL;
  assert_kiln_ok(load_torch(f, "mlp_f64.pt", "4-3-2", &model));
  check_logits(f, model, KILN_F64, 1e-12);
  kiln_model_release(model);
}

/* nn.Sequential(Flatten(), Linear(4, 3), ReLU(), Dropout(), Linear(3, 2)):
 * the spec's flatten shifts the names to 1.* and 4.*, and the model takes
 * the [N, 1, 2, 2] images a Flatten is there for. */
static void loads_flatten(void **state) {
  fixture *f = *state;
  kiln_model *model = NULL;
  assert_kiln_ok(load_torch(f, "mlp_flatten.pt", "4-3-2:dropout=0.5:flatten", &model));
  const char *name = NULL, *described = NULL;
  assert_kiln_ok(kiln_model_parameter_name(model, 0, &name));
  assert_string_equal(name, "1.weight");
  assert_kiln_ok(kiln_model_parameter_name(model, 3, &name));
  assert_string_equal(name, "4.bias");
  assert_kiln_ok(kiln_model_describe(model, &described));
  assert_string_equal(described, "4-3-2:dropout=0.5:flatten");
  check_logits(f, model, KILN_F32, 1e-6);
  float xf[8];
  for (int i = 0; i < 8; ++i) xf[i] = (float)X[i];
  const int64_t image[4] = {2, 1, 2, 2};
  kiln_tensor *x = kiln_test_tensor_f32(f->ctx, xf, image, 4, cpu), *y = NULL;
  assert_kiln_ok(kiln_model_forward(model, x, &y));
  double want[4];
  reference_logits(X, want);
  assert_tensor_close(y, want, 4, 1e-6, 1e-6);
  kiln_tensor_release(y);
  kiln_tensor_release(x);
  kiln_model_release(model);
  /* The same layers in the list form load the same file. */
  assert_kiln_ok(load_torch(f, "mlp_flatten.pt", "flatten;linear(4,3);relu;dropout(0.5);linear(3,2)", &model));
  kiln_model_release(model);
}

/* kiln_model_load_weights reads a torch.save file into a model too, and a
 * file of another architecture leaves the weights as they were. */
static void load_weights_from_torch_save(void **state) {
  fixture *f = *state;
  kiln_model_spec *spec = spec_of("4-3-2");
  kiln_model *model = NULL;
  assert_kiln_ok(kiln_model_create(f->ctx, spec, cpu, &model));
  snprintf(f->path, sizeof f->path, "%s/mlp_big_endian.pt", KILN_TORCH_FIXTURES);
  assert_kiln_ok(kiln_model_load_weights(model, f->path));
  check_logits(f, model, KILN_F32, 1e-6);
  snprintf(f->path, sizeof f->path, "%s/batchnorm.pt", KILN_TORCH_FIXTURES);
  assert_status(kiln_model_load_weights(model, f->path), KILN_ERROR_SHAPE_MISMATCH);
  check_logits(f, model, KILN_F32, 1e-6);
  kiln_model_release(model);
  kiln_model_spec_release(spec);
}

/* What a file without kiln's spec, or one that does not fit the spec given,
 * is told: the layers it holds, and the spec that fits it when one does. */
static void messages_say_what_fits(void **state) {
  fixture *f = *state;
  kiln_model *model = (kiln_model *)(uintptr_t)1;
  /* A torch.save file and a PyTorch safetensors file given without a spec. */
  snprintf(f->path, sizeof f->path, "%s/mlp.pt", KILN_TORCH_FIXTURES);
  assert_status(kiln_model_load(f->ctx, f->path, cpu, &model), KILN_ERROR_FORMAT);
  assert_null(model);
  assert_last_error_contains("is a torch.save file");
  assert_last_error_contains("--spec");
  assert_last_error_contains("It holds Linear(4, 3) at 0; Linear(3, 2) at 2. The spec that fits it is \"4-3-2\"");
  snprintf(f->path, sizeof f->path, "%s/st.safetensors", f->dir);
  write_state_dict(f->path, MLP, 4, 0);
  assert_status(kiln_model_load(f->ctx, f->path, cpu, &model), KILN_ERROR_FORMAT);
  assert_last_error_contains("is a safetensors file: a state_dict as PyTorch saves it");
  assert_last_error_contains("kiln_model_load_with_spec");
  assert_last_error_contains("The spec that fits it is \"4-3-2\"");
  /* A spec of other sizes, a Flatten the spec lacks. */
  assert_status(load_torch(f, "mlp.pt", "4-5-2", &model), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("\"0.weight\" has shape [3, 4]");
  assert_last_error_contains("The spec that fits it is \"4-3-2\"");
  assert_status(load_torch(f, "mlp_flatten.pt", "4-3-2", &model), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("Linear(4, 3) at 1; Linear(3, 2) at 4");
  assert_last_error_contains("The spec that fits it is \"4-3-2:dropout=0.5:flatten\"");
  /* Layers kiln does not have. */
  assert_status(load_torch(f, "batchnorm.pt", "4-3-2", &model), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("BatchNorm1d running statistics at 1.*: kiln has no BatchNorm");
  assert_true(strstr(kiln_last_error(), "spec that fits") == NULL);
  /* Linears in a form PyTorch saves them in but kiln does not read: how to
   * save them plainly (the bias apart from a parametrized weight is not
   * listed as a layer of its own). */
  static const struct {
    const char *file, *says;
  } saved_otherwise[] = {
      {"weight_norm.pt",
       "It holds a parametrized weight (weight_norm's or another parametrization's original0, ...) "
       "at 0.parametrizations.weight.*: save it after "
       "torch.nn.utils.parametrize.remove_parametrizations(layer, \"weight\"); Linear(3, 2) at 2."},
      {"weight_norm_g_v.pt",
       "It holds a layer under torch.nn.utils.weight_norm (weight_g, weight_v) at 0.*: save it "
       "after torch.nn.utils.remove_weight_norm(layer); Linear(3, 2) at 2."},
      {"pruned.pt",
       "It holds a pruned layer (weight_orig, weight_mask) at 0.*: save it after "
       "torch.nn.utils.prune.remove(layer, \"weight\"); Linear(3, 2) at 2."},
      {"weight_saved_once.pt",
       "It holds Linear(4, 3) at 0; a bias without its weight at 2.*: a weight shared with "
       "another layer is saved once by safetensors' save_model; "
       "torch.save(model.state_dict(), PATH) keeps every name."},
  };
  for (size_t i = 0; i < sizeof saved_otherwise / sizeof saved_otherwise[0]; ++i) {
    assert_status(load_torch(f, saved_otherwise[i].file, "4-3-2", &model), KILN_ERROR_SHAPE_MISMATCH);
    assert_last_error_contains(saved_otherwise[i].says);
    assert_true(strstr(kiln_last_error(), "spec that fits") == NULL);
  }
  /* Linears named by the model's attributes or a ModuleList, which chain
   * in the file's order: the nn.Sequential that names them as kiln reads. */
  assert_status(load_torch(f, "custom_names.pt", "4-3-2", &model), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains(
      "It holds Linear(4, 3) at fc1; Linear(3, 2) at fc2. The spec that fits it is \"4-3-2\" "
      "once its Linears, in the file's order, are saved under nn.Sequential's names "
      "(torch.save(nn.Sequential(model.fc1, nn.ReLU(), model.fc2).state_dict(), PATH))");
  assert_status(load_torch(f, "module_list.pt", "4-3-2", &model), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains(
      "(torch.save(nn.Sequential(model.layers[0], nn.ReLU(), model.layers[1]).state_dict(), "
      "PATH))");
  /* The quickstart tutorial's model: its Sequential under a name. */
  assert_status(load_torch(f, "tutorial.pt", "4-8-8-2", &model), KILN_ERROR_SHAPE_MISMATCH);
  assert_last_error_contains("Linear(4, 8) at linear_relu_stack.0");
  assert_last_error_contains("\"4-8-8-2\" once its tensors are saved without their prefix \"linear_relu_stack.\"");
  assert_last_error_contains("torch.save(model.linear_relu_stack.state_dict(), PATH)");
  assert_null(model);
}

/* Refusals as the C API reports them (torch_file_test.cpp has every case). */
static void torch_save_refusals(void **state) {
  fixture *f = *state;
  kiln_model *model = NULL;
  assert_status(load_torch(f, "hostile_os_system.pt", "4-3-2", &model), KILN_ERROR_FORMAT);
  assert_last_error_contains("refused: its pickle calls os.system");
  assert_status(load_torch(f, "hostile_in_state_dict.pt", "4-3-2", &model), KILN_ERROR_FORMAT);
  assert_last_error_contains("posix.system");
  assert_status(load_torch(f, "whole_model.pt", "4-3-2", &model), KILN_ERROR_FORMAT);
  assert_last_error_contains("model.state_dict()");
  assert_status(load_torch(f, "checkpoint.pt", "4-3-2", &model), KILN_ERROR_FORMAT);
  assert_last_error_contains("checkpoint[\"model_state_dict\"]");
  assert_status(load_torch(f, "bool.pt", "4-3-2", &model), KILN_ERROR_DTYPE_MISMATCH);
  assert_status(load_torch(f, "legacy.pt", "4-3-2", &model), KILN_ERROR_FORMAT);
  assert_last_error_contains("_use_new_zipfile_serialization=False");
  assert_status(load_torch(f, "dtypes.pt", "4-3-2", &model), KILN_ERROR_SHAPE_MISMATCH);
  /* The context is still usable. */
  assert_kiln_ok(load_torch(f, "mlp.pt", "4-3-2", &model));
  kiln_model_release(model);
}

static void bad_arguments(void **state) {
  fixture *f = *state;
  write_state_dict(f->path, MLP, 4, 0);
  kiln_model_spec *spec = spec_of("4-3-2");
  kiln_model *model = (kiln_model *)(uintptr_t)1;
  assert_status(kiln_model_load_with_spec(NULL, f->path, spec, cpu, &model), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(model);
  assert_status(kiln_model_load_with_spec(f->ctx, NULL, spec, cpu, &model), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_model_load_with_spec(f->ctx, f->path, NULL, cpu, &model), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_model_load_with_spec(f->ctx, f->path, spec, cpu, NULL), KILN_ERROR_INVALID_ARGUMENT);
  kiln_device bad = {(kiln_device_kind)7, 0};
  assert_status(kiln_model_load_with_spec(f->ctx, f->path, spec, bad, &model), KILN_ERROR_INVALID_ARGUMENT);
  kiln_model_spec *empty = NULL;
  assert_kiln_ok(kiln_model_spec_create(&empty));
  assert_status(kiln_model_load_with_spec(f->ctx, f->path, empty, cpu, &model), KILN_ERROR_INVALID_ARGUMENT);
  kiln_model_spec_release(empty);
  kiln_model_spec_release(spec);
  /* A released spec is an invalid handle, not a crash. */
  model = (kiln_model *)(uintptr_t)1;
  assert_status(kiln_model_load_with_spec(f->ctx, f->path, spec, cpu, &model), KILN_ERROR_INVALID_HANDLE);
  assert_null(model);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(loads_pytorch_layout, setup, teardown),
      cmocka_unit_test_setup_teardown(loads_f64, setup, teardown),
      cmocka_unit_test_setup_teardown(loads_kiln_files, setup, teardown),
      cmocka_unit_test_setup_teardown(missing_key, setup, teardown),
      cmocka_unit_test_setup_teardown(extra_key, setup, teardown),
      cmocka_unit_test_setup_teardown(wrong_shape, setup, teardown),
      cmocka_unit_test_setup_teardown(wrong_dtype, setup, teardown),
      cmocka_unit_test_setup_teardown(malformed_files, setup, teardown),
      cmocka_unit_test_setup_teardown(bad_arguments, setup, teardown),
      cmocka_unit_test_setup_teardown(loads_torch_save_files, setup, teardown),
      cmocka_unit_test_setup_teardown(loads_flatten, setup, teardown),
      cmocka_unit_test_setup_teardown(load_weights_from_torch_save, setup, teardown),
      cmocka_unit_test_setup_teardown(messages_say_what_fits, setup, teardown),
      cmocka_unit_test_setup_teardown(torch_save_refusals, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
