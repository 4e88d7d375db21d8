/* safetensors through kiln_model_save / kiln_model_load: a hand-written
 * valid file loads with its values; at least thirty malformed files all fail
 * with KILN_ERROR_FORMAT from the validating reader (never a crash or an
 * over-read: run this under valgrind); saving round-trips and is atomic.
 * The independent Python reader (safetensors_reader.py) checks the writer
 * from outside. */
#include "support.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};

typedef kiln_test_file_fixture fixture;

static int setup(void **state) {
  *state = kiln_test_file_fixture_create("model.safetensors");
  return 0;
}

static int teardown(void **state) {
  kiln_test_file_fixture_destroy(*state);
  return 0;
}

/* Writes the 8-byte little-endian `declared` length, then header_size bytes
 * of header, then data_size bytes of data (the float pattern of DATA,
 * zero-padded). */
static const float DATA[9] = {1, 2, 3, 4, 5, 6, -1, -2, -3}; /* weight [3, 2], bias [3] */

static void write_file(const char *path, uint64_t declared, const char *header, size_t header_size,
                       size_t data_size) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = (unsigned char)(declared >> (8 * i));
  assert_int_equal(fwrite(len, 1, 8, fp), 8);
  if (header_size) assert_int_equal(fwrite(header, 1, header_size, fp), header_size);
  for (size_t i = 0; i < data_size; ++i) {
    unsigned char b = i < sizeof DATA ? ((const unsigned char *)DATA)[i] : 0;
    assert_int_equal(fputc(b, fp), b);
  }
  assert_int_equal(fclose(fp), 0);
}

static void write_st(const char *path, const char *header, size_t data_size) {
  write_file(path, strlen(header), header, strlen(header), data_size);
}

#define META "\"__metadata__\":{\"format\":\"kiln-model\",\"kiln.spec\":\"2-3\"}"
#define WEIGHT "\"0.weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]}"
#define BIAS "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[24,36]}"
#define VALID "{" META "," WEIGHT "," BIAS "}"

/* ---- a valid hand-written file ---------------------------------------------- */

static void check_loaded_values(kiln_model *model) {
  kiln_tensor *w = NULL, *b = NULL;
  assert_kiln_ok(kiln_model_parameter(model, 0, &w));
  assert_kiln_ok(kiln_model_parameter(model, 1, &b));
  const double want_w[6] = {1, 2, 3, 4, 5, 6}, want_b[3] = {-1, -2, -3};
  assert_tensor_close(w, want_w, 6, 0.0, 0.0);
  assert_tensor_close(b, want_b, 3, 0.0, 0.0);
  kiln_tensor_release(w);
  kiln_tensor_release(b);
}

static void test_valid_file_loads(void **state) {
  fixture *f = *state;
  /* Keys in any order, the data in offset order, escapes in strings, and
   * the space padding the format recommends. */
  const char *headers[] = {
      VALID,
      "{" BIAS "," WEIGHT "," META "}",
      "{\"__metadata__\":{\"form\\u0061t\":\"kiln-model\",\"kiln.spec\":\"2-3\",\"note\":\"\\\"\\u00e9\\ud83d\\ude00\\n\"},"
      "\"0.weight\":{\"shape\":[3,2],\"data_offsets\":[0,24],\"dtype\":\"F32\"}," BIAS "}      ",
  };
  for (int i = 0; i < 3; ++i) {
    write_st(f->path, headers[i], 36);
    kiln_model *model = NULL;
    assert_kiln_ok(kiln_model_load(f->ctx, f->path, cpu, &model));
    check_loaded_values(model);
    kiln_model_release(model);
  }
}

/* ---- malformed files ------------------------------------------------------ */

typedef struct {
  const char *header;
  size_t data_size;
  const char *needle; /* part of the expected message */
} hostile;

static const hostile HOSTILE[] = {
    /* JSON syntax */
    {"{" META "," WEIGHT "," BIAS, 36, "unterminated object"},
    {"{" META "," WEIGHT "," BIAS "}x", 36, "unexpected data after the JSON value"},
    {"[1,2]", 36, "does not start with '{'"},
    {" {" META "," WEIGHT "," BIAS "}", 36, "does not start with '{'"},
    {"{\"0.weight\":1}", 0, "must be described by an object"},
    {"{" META "," WEIGHT "," BIAS ",\"x\":true}", 36, "unsupported JSON value"},
    {"{" META "," WEIGHT "," BIAS ",\"x\":null}", 36, "unsupported JSON value"},
    {"{" META ",\"0.weight\":{\"dtype\":\"F32\",\"shape\":[3.0,2],\"data_offsets\":[0,24]}," BIAS "}", 36,
     "non-integer"},
    {"{" META ",\"0.weight\":{\"dtype\":\"F32\",\"shape\":[03,2],\"data_offsets\":[0,24]}," BIAS "}", 36,
     "leading zero"},
    {"{" META ",\"0.weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,99999999999999999999]}," BIAS "}",
     36, "does not fit in 64 bits"},
    {"{\"__metadata__\":{\"a\":\"\\q\"}," WEIGHT "," BIAS "}", 36, "invalid escape"},
    {"{\"__metadata__\":{\"a\":\"\\ud800\"}," WEIGHT "," BIAS "}", 36, "surrogate"},
    {"{\"__metadata__\":{\"a\":\"tab\there\"}," WEIGHT "," BIAS "}", 36, "control character"},
    {"{\"__metadata__\":{\"a\":\"\xff\"}," WEIGHT "," BIAS "}", 36, "invalid UTF-8"},
    {"{\"__metadata__\":{\"a\":\"\xc0\xaf\"}," WEIGHT "," BIAS "}", 36, "invalid UTF-8"}, /* overlong '/' */
    {"{" META "," WEIGHT "," WEIGHT "," BIAS "}", 36, "duplicate key \"0.weight\""},
    /* metadata */
    {"{\"__metadata__\":{\"format\":1}," WEIGHT "," BIAS "}", 36, "must map strings to strings"},
    {"{\"__metadata__\":\"kiln\"," WEIGHT "," BIAS "}", 36, "\"__metadata__\" must be an object"},
    {"{\"__metadata__\":{\"a\":[\"b\"]}," WEIGHT "," BIAS "}", 36, "must map strings to strings"},
    /* tensor descriptions */
    {"{" META ",\"0.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[3,2],\"data_offsets\":[0,6]}," BIAS "}", 18,
     "unsupported dtype \"F8_E4M3\""},
    {"{" META ",\"0.weight\":{\"dtype\":7,\"shape\":[3,2],\"data_offsets\":[0,24]}," BIAS "}", 36, "must be a string"},
    {"{" META ",\"0.weight\":{\"shape\":[3,2],\"data_offsets\":[0,24]}," BIAS "}", 36, "needs \"dtype\""},
    {"{" META ",\"0.weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24],\"x\":[]}," BIAS "}", 36,
     "unknown field \"x\""},
    {"{" META ",\"0.weight\":{\"dtype\":\"F32\",\"shape\":[3,3],\"data_offsets\":[0,24]}," BIAS "}", 36,
     "needs 36 bytes"},
    /* ... and more bytes than the shape needs (not read, but they must not be there) */
    {"{" META ",\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,24]}," BIAS "}", 36,
     "needs 16 bytes but data_offsets [0, 24] hold 24"},
    {"{" META ",\"0.weight\":{\"dtype\":\"F32\",\"shape\":[-3,2],\"data_offsets\":[0,24]}," BIAS "}", 36,
     "non-negative"},
    {"{" META ",\"0.weight\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,24]}," BIAS "}",
     36, "shape [4611686018427387904, 4] is too large"}, /* the whole shape, not its dims up to the overflow */
    /* empty, but the other sizes multiply past 64 bits */
    {"{" META "," WEIGHT "," BIAS ",\"x\":{\"dtype\":\"F32\",\"shape\":[0,4611686018427387904,4],"
     "\"data_offsets\":[36,36]}}", 36, "too large"},
    {"{" META ",\"0.weight\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,6],\"data_offsets\":[0,24]}," BIAS "}",
     36, "at most 8"},
    {"{" META ",\"0.weight\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,24]}," BIAS "}", 36,
     "must be an array"},
    {"{" META ",\"0.weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24,36]}," BIAS "}", 36,
     "two integers"},
    {"{" META ",\"0.weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[-4,20]}," BIAS "}", 36,
     "invalid data_offsets"},
    {"{" META ",\"0.weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[24,0]}," BIAS "}", 36,
     "invalid data_offsets"},
    /* the data section */
    {"{" META "," WEIGHT ",\"0.bias\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}", 36,
     "past the end of the data section"},
    {"{" META "," WEIGHT ",\"0.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[20,32]}}", 36, "overlaps"},
    {"{" META "," WEIGHT ",\"0.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[28,40]}}", 40, "hole"},
    {VALID, 40, "cover 36 bytes but the data section holds 40"},
    {VALID, 20, "past the end of the data section"}, /* truncated data */
    {"{}", 4, "cover 0 bytes"},
};

static void expect_format_error(fixture *f, const char *needle) {
  kiln_model *model = (kiln_model *)(uintptr_t)1;
  assert_status(kiln_model_load(f->ctx, f->path, cpu, &model), KILN_ERROR_FORMAT);
  assert_null(model);
  assert_last_error_contains("safetensors file");
  assert_last_error_contains(needle);
}

static void test_hostile_headers(void **state) {
  fixture *f = *state;
  for (size_t i = 0; i < sizeof HOSTILE / sizeof HOSTILE[0]; ++i) {
    write_st(f->path, HOSTILE[i].header, HOSTILE[i].data_size);
    print_message("hostile case %zu: %s\n", i, HOSTILE[i].needle);
    expect_format_error(f, HOSTILE[i].needle);
  }
}

/* Files whose trouble is in the length prefix or the raw bytes. */
static void test_hostile_lengths(void **state) {
  fixture *f = *state;
  /* An empty file is told as such (issue 23 item 4), not as a short header. */
  FILE *fp = fopen(f->path, "wb");
  assert_non_null(fp);
  fclose(fp);
  kiln_model *model = (kiln_model *)(uintptr_t)1;
  assert_status(kiln_model_load(f->ctx, f->path, cpu, &model), KILN_ERROR_FORMAT);
  assert_null(model);
  assert_last_error_contains("is empty (0 bytes)");

  /* A bare pickle (pickle.dumps({'a': 1}, protocol=4)) is told as one, not
   * as a safetensors file with a header length of 2^62 or so. */
  static const unsigned char pickle[] = {0x80, 0x04, 0x95, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0x7d,
                                         0x94, 0x8c, 0x01, 0x61, 0x94, 0x4b, 0x01, 0x73, 0x2e};
  fp = fopen(f->path, "wb");
  assert_int_equal(fwrite(pickle, 1, sizeof pickle, fp), sizeof pickle);
  fclose(fp);
  model = (kiln_model *)(uintptr_t)1;
  assert_status(kiln_model_load(f->ctx, f->path, cpu, &model), KILN_ERROR_FORMAT);
  assert_null(model);
  assert_last_error_contains("is a bare pickle stream");

  fp = fopen(f->path, "wb");
  assert_int_equal(fwrite("\x02\0\0\0\0\0\0", 1, 7, fp), 7);
  fclose(fp);
  expect_format_error(f, "the file is 7 bytes");

  write_file(f->path, 1000, VALID, strlen(VALID), 36); /* length beyond the file */
  expect_format_error(f, "runs past the end of the file");
  write_file(f->path, UINT64_MAX, VALID, strlen(VALID), 36);
  expect_format_error(f, "exceeds the limit");
  write_file(f->path, 100000001, VALID, strlen(VALID), 36);
  expect_format_error(f, "exceeds the limit");
  write_file(f->path, 0, "", 0, 36);
  expect_format_error(f, "too short for a JSON object");
  write_file(f->path, 5, VALID, strlen(VALID), 36); /* length cuts the JSON */
  expect_format_error(f, "header");
  /* A NUL inside the header. */
  char with_nul[] = VALID;
  with_nul[20] = '\0';
  write_file(f->path, strlen(VALID), with_nul, strlen(VALID), 36);
  expect_format_error(f, "header");
}

/* Deep nesting is refused at a fixed depth, however deep the file goes. */
static void test_deep_nesting(void **state) {
  fixture *f = *state;
  const size_t depths[] = {17, 100000};
  for (int d = 0; d < 2; ++d) {
    size_t depth = depths[d];
    char *header = malloc(2 * depth + 64);
    assert_non_null(header);
    size_t n = (size_t)sprintf(header, "{\"__metadata__\":{\"a\":");
    for (size_t i = 0; i < depth; ++i) header[n++] = '[';
    for (size_t i = 0; i < depth; ++i) header[n++] = ']';
    strcpy(header + n, "}}");
    write_st(f->path, header, 0);
    free(header);
    expect_format_error(f, "nested deeper than");
  }
}

static void test_missing_file(void **state) {
  fixture *f = *state;
  kiln_model *model = NULL;
  assert_status(kiln_model_load(f->ctx, f->path, cpu, &model), KILN_ERROR_IO);
  assert_last_error_contains("model.safetensors");
  assert_last_error_contains("No such file");
  assert_status(kiln_model_load(f->ctx, f->dir, cpu, &model), KILN_ERROR_IO);
  assert_last_error_contains("not a regular file");
}

/* ---- writing ---------------------------------------------------------------- */

/* Counts the directory's entries other than . and .. */
static int entries_in(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) ++n;
  closedir(d);
  return n;
}

static void test_save_round_trip_and_atomic(void **state) {
  fixture *f = *state;
  kiln_model *a = kiln_test_model(f->ctx, "5-7-3"), *b = kiln_test_model(f->ctx, "5-7-3");
  assert_kiln_ok(kiln_model_save(a, f->path));
  /* Saving over an existing file replaces it, leaving no temporary behind. */
  assert_kiln_ok(kiln_model_save(b, f->path));
  assert_int_equal(entries_in(f->dir), 1);

  kiln_model *loaded = NULL;
  assert_kiln_ok(kiln_model_load(f->ctx, f->path, cpu, &loaded));
  int64_t count = 0;
  assert_kiln_ok(kiln_model_num_parameter_tensors(b, &count));
  assert_int_equal(count, 4);
  for (int64_t i = 0; i < count; ++i) {
    kiln_tensor *want = NULL, *got = NULL;
    assert_kiln_ok(kiln_model_parameter(b, i, &want));
    assert_kiln_ok(kiln_model_parameter(loaded, i, &got));
    int64_t n = 0;
    assert_kiln_ok(kiln_tensor_numel(want, &n));
    double *values = malloc((size_t)n * sizeof(double));
    assert_non_null(values);
    kiln_test_read_f64(want, values, n);
    assert_tensor_close(got, values, n, 0.0, 0.0);
    free(values);
    kiln_tensor_release(want);
    kiln_tensor_release(got);
  }
  kiln_model_release(loaded);

  /* A failed save (the target is a directory; a missing directory) reports
   * IO with the path, leaves no temporary and changes nothing. */
  char sub[700];
  snprintf(sub, sizeof sub, "%s/subdir", f->dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  assert_status(kiln_model_save(a, sub), KILN_ERROR_IO);
  assert_last_error_contains("subdir");
  assert_int_equal(entries_in(f->dir), 2);
  assert_int_equal(entries_in(sub), 0);
  snprintf(sub, sizeof sub, "%s/missing/model.safetensors", f->dir);
  assert_status(kiln_model_save(a, sub), KILN_ERROR_IO);
  assert_last_error_contains("missing/model.safetensors");
  assert_last_error_contains("No such file");

  kiln_model_release(a);
  kiln_model_release(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_valid_file_loads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hostile_headers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hostile_lengths, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deep_nesting, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_file, setup, teardown),
      cmocka_unit_test_setup_teardown(test_save_round_trip_and_atomic, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
