/* IDX files (raw and gzip) through kiln_dataset_load_idx / load_mnist:
 * round trips of every element type, every malformed-file error, and the
 * real Fashion-MNIST files where they are installed. */
#include "support.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};

/* Fashion-MNIST as the distribution package installs it. */
#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

typedef struct {
  kiln_context *ctx;
  char dir[512];
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->ctx = kiln_test_context_create(0);
  kiln_test_make_temp_dir(f->dir, sizeof f->dir);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kiln_test_remove_tree(f->dir);
  kiln_context_release(f->ctx);
  free(f);
  return 0;
}

static void path_in(const fixture *f, const char *name, char *out, size_t size) {
  int n = snprintf(out, size, "%s/%s", f->dir, name);
  assert_true(n > 0 && (size_t)n < size);
}

/* ---- writing IDX files ---------------------------------------------------- */

/* The bytes of an IDX file: header (type, dims) then payload as given
 * (already big-endian), then `extra` trailing bytes. */
typedef struct {
  unsigned char bytes[4096];
  size_t size;
} buffer;

static void idx_bytes(buffer *b, unsigned char type, int ndim, const uint32_t *dims, const void *payload,
                      size_t payload_size, size_t extra) {
  b->size = 0;
  b->bytes[b->size++] = 0;
  b->bytes[b->size++] = 0;
  b->bytes[b->size++] = type;
  b->bytes[b->size++] = (unsigned char)ndim;
  for (int i = 0; i < ndim; ++i) {
    b->bytes[b->size++] = (unsigned char)(dims[i] >> 24);
    b->bytes[b->size++] = (unsigned char)(dims[i] >> 16);
    b->bytes[b->size++] = (unsigned char)(dims[i] >> 8);
    b->bytes[b->size++] = (unsigned char)dims[i];
  }
  assert_true(b->size + payload_size + extra <= sizeof b->bytes);
  if (payload_size) memcpy(b->bytes + b->size, payload, payload_size);
  b->size += payload_size;
  memset(b->bytes + b->size, 0xAB, extra);
  b->size += extra;
}

static void write_raw(const char *path, const void *data, size_t size) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(data, 1, size, fp), size);
  assert_int_equal(fclose(fp), 0);
}

static void write_gz(const char *path, const void *data, size_t size) {
  gzFile gz = gzopen(path, "wb9");
  assert_non_null(gz);
  assert_int_equal(gzwrite(gz, data, (unsigned)size), (int)size);
  assert_int_equal(gzclose(gz), Z_OK);
}

static void write_file(const char *path, const buffer *b, int gzip) {
  if (gzip)
    write_gz(path, b->bytes, b->size);
  else
    write_raw(path, b->bytes, b->size);
}

/* A u8 image file [n, rows, cols] with pixel (i, p) = (7 * i + 3 * p) % 256. */
static void write_images(const char *path, uint32_t n, uint32_t rows, uint32_t cols, int gzip) {
  unsigned char pixels[2048];
  assert_true(n * rows * cols <= sizeof pixels);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t p = 0; p < rows * cols; ++p) pixels[i * rows * cols + p] = (unsigned char)((7 * i + 3 * p) % 256);
  const uint32_t dims[3] = {n, rows, cols};
  buffer b;
  idx_bytes(&b, 0x08, 3, dims, pixels, n * rows * cols, 0);
  write_file(path, &b, gzip);
}

/* A u8 label file [n] with label i = labels[i]. */
static void write_labels(const char *path, const unsigned char *labels, uint32_t n, int gzip) {
  buffer b;
  idx_bytes(&b, 0x08, 1, &n, labels, n, 0);
  write_file(path, &b, gzip);
}

/* ---- reading back -------------------------------------------------------- */

/* Loads images + labels and checks size, features, classes, and that batch
 * 0..n gives images / 255 and the labels. */
static void check_u8_dataset(const fixture *f, const char *images, const char *labels, uint32_t n, uint32_t rows,
                             uint32_t cols, const unsigned char *want_labels, int64_t want_classes) {
  kiln_dataset *ds = NULL;
  assert_kiln_ok(kiln_dataset_load_idx(f->ctx, images, labels, &ds));
  int64_t v = 0;
  assert_kiln_ok(kiln_dataset_size(ds, &v));
  assert_int_equal(v, n);
  assert_kiln_ok(kiln_dataset_num_features(ds, &v));
  assert_int_equal(v, rows * cols);
  assert_kiln_ok(kiln_dataset_num_classes(ds, &v));
  assert_int_equal(v, want_classes);

  kiln_tensor *x = NULL, *y = NULL;
  assert_kiln_ok(kiln_dataset_batch(ds, 0, n, cpu, &x, &y));
  double *want_x = malloc(sizeof(double) * n * rows * cols), want_y[64];
  assert_non_null(want_x);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t p = 0; p < rows * cols; ++p) want_x[i * rows * cols + p] = (double)((7 * i + 3 * p) % 256) / 255.0;
    want_y[i] = want_labels[i];
  }
  assert_tensor_close(x, want_x, (int64_t)n * rows * cols, 1e-6, 0.0);
  assert_tensor_close(y, want_y, n, 0.0, 0.0);
  free(want_x);
  kiln_tensor_release(x);
  kiln_tensor_release(y);
  kiln_dataset_release(ds);
}

static const unsigned char LABELS[6] = {3, 0, 1, 4, 1, 2};

static void test_raw_round_trip(void **state) {
  fixture *f = *state;
  char images[600], labels[600];
  path_in(f, "images-idx3-ubyte", images, sizeof images);
  path_in(f, "labels-idx1-ubyte", labels, sizeof labels);
  write_images(images, 6, 4, 5, 0);
  write_labels(labels, LABELS, 6, 0);
  check_u8_dataset(f, images, labels, 6, 4, 5, LABELS, 5);
}

static void test_gzip_round_trip(void **state) {
  fixture *f = *state;
  char images[600], labels[600];
  path_in(f, "images-idx3-ubyte.gz", images, sizeof images);
  path_in(f, "labels-idx1-ubyte.gz", labels, sizeof labels);
  write_images(images, 6, 4, 5, 1);
  write_labels(labels, LABELS, 6, 1);
  check_u8_dataset(f, images, labels, 6, 4, 5, LABELS, 5);
}

/* gzip is recognised by its magic bytes, not the name; a raw file named .gz
 * is read as raw. */
static void test_gzip_detected_by_content(void **state) {
  fixture *f = *state;
  char images[600], labels[600];
  path_in(f, "images-compressed", images, sizeof images);
  path_in(f, "labels-raw.gz", labels, sizeof labels);
  write_images(images, 6, 4, 5, 1);
  write_labels(labels, LABELS, 6, 0);
  check_u8_dataset(f, images, labels, 6, 4, 5, LABELS, 5);
}

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

/* f32 and f64 images and i8, i16, i32 labels, stored big-endian, come back
 * with their values (negative-free labels; floats unscaled). */
static void test_wide_types(void **state) {
  fixture *f = *state;
  const uint32_t n = 3, feats = 2;
  const float xf[6] = {1.5f, -2.25f, 3.0f, 1e-3f, -7.0f, 0.0f};
  const double want_x[6] = {1.5, -2.25, 3.0, (double)1e-3f, -7.0, 0.0};
  unsigned char f32be[24], f64be[48];
  for (int i = 0; i < 6; ++i) {
    uint32_t u;
    memcpy(&u, &xf[i], 4);
    put_be32(f32be + 4 * i, u);
    double d = want_x[i];
    uint64_t w;
    memcpy(&w, &d, 8);
    put_be32(f64be + 8 * i, (uint32_t)(w >> 32));
    put_be32(f64be + 8 * i + 4, (uint32_t)w);
  }
  const uint32_t xdims[2] = {n, feats};
  char images32[600], images64[600], labels[600];
  path_in(f, "f32", images32, sizeof images32);
  path_in(f, "f64", images64, sizeof images64);
  path_in(f, "labels", labels, sizeof labels);
  buffer b;
  idx_bytes(&b, 0x0D, 2, xdims, f32be, sizeof f32be, 0);
  write_file(images32, &b, 0);
  idx_bytes(&b, 0x0E, 2, xdims, f64be, sizeof f64be, 0);
  write_file(images64, &b, 1);

  /* Labels 2, 300, 7 as i16 / i32; 2, 100, 7 as i8. */
  const unsigned char i8[3] = {2, 100, 7};
  const unsigned char i16[6] = {0, 2, 0x01, 0x2C, 0, 7};
  const unsigned char i32[12] = {0, 0, 0, 2, 0, 0, 0x01, 0x2C, 0, 0, 0, 7};
  struct {
    unsigned char type;
    const void *data;
    size_t size;
    double max;
  } label_cases[] = {{0x09, i8, 3, 100}, {0x0B, i16, 6, 300}, {0x0C, i32, 12, 300}};
  for (size_t c = 0; c < 3; ++c) {
    idx_bytes(&b, label_cases[c].type, 1, &n, label_cases[c].data, label_cases[c].size, 0);
    write_file(labels, &b, (int)(c % 2));
    for (int which = 0; which < 2; ++which) {
      kiln_dataset *ds = NULL;
      assert_kiln_ok(kiln_dataset_load_idx(f->ctx, which ? images64 : images32, labels, &ds));
      int64_t classes = 0;
      assert_kiln_ok(kiln_dataset_num_classes(ds, &classes));
      assert_int_equal(classes, (int64_t)label_cases[c].max + 1);
      kiln_tensor *x = NULL, *y = NULL;
      assert_kiln_ok(kiln_dataset_batch(ds, 0, n, cpu, &x, &y));
      assert_tensor_close(x, want_x, 6, 0.0, 0.0);
      const double want_y[3] = {2, label_cases[c].max, 7};
      assert_tensor_close(y, want_y, 3, 0.0, 0.0);
      kiln_tensor_release(x);
      kiln_tensor_release(y);
      kiln_dataset_release(ds);
    }
  }
}

/* ---- malformed files ------------------------------------------------------ */

/* Loading `bad` as the image file (with a good label file) fails with
 * `status` and a message containing `needle`. */
static void expect_bad_images(const fixture *f, const char *bad, kiln_status status, const char *needle) {
  char labels[600];
  path_in(f, "good-labels", labels, sizeof labels);
  write_labels(labels, LABELS, 6, 0);
  kiln_dataset *ds = (kiln_dataset *)(uintptr_t)1;
  assert_status(kiln_dataset_load_idx(f->ctx, bad, labels, &ds), status);
  assert_null(ds);
  assert_last_error_contains(needle);
}

static void write_bad(const fixture *f, const char *name, const buffer *b, int gzip, char *path, size_t size) {
  path_in(f, name, path, size);
  write_file(path, b, gzip);
}

static void test_truncated_and_trailing(void **state) {
  fixture *f = *state;
  unsigned char pixels[6 * 4] = {0};
  const uint32_t dims[3] = {6, 2, 2};
  char path[600];
  buffer b;
  for (int gzip = 0; gzip < 2; ++gzip) {
    idx_bytes(&b, 0x08, 3, dims, pixels, 23, 0); /* one byte short */
    write_bad(f, "short", &b, gzip, path, sizeof path);
    expect_bad_images(f, path, KILN_ERROR_FORMAT, "need 24 bytes of data, found 23");

    idx_bytes(&b, 0x08, 3, dims, pixels, 24, 5); /* five bytes too many */
    write_bad(f, "long", &b, gzip, path, sizeof path);
    expect_bad_images(f, path, KILN_ERROR_FORMAT, "trailing data");

    idx_bytes(&b, 0x08, 3, dims, pixels, 0, 0); /* header only */
    write_bad(f, "empty-payload", &b, gzip, path, sizeof path);
    expect_bad_images(f, path, KILN_ERROR_FORMAT, "found 0");

    idx_bytes(&b, 0x08, 3, dims, NULL, 0, 0);
    b.size = 9; /* cut inside the dimensions */
    write_bad(f, "short-header", &b, gzip, path, sizeof path);
    expect_bad_images(f, path, KILN_ERROR_FORMAT, "truncated");
  }
}

/* A gzip stream cut short in its compressed bytes. */
static void test_truncated_gzip_stream(void **state) {
  fixture *f = *state;
  char good[600], cut[600];
  path_in(f, "whole.gz", good, sizeof good);
  path_in(f, "cut.gz", cut, sizeof cut);
  write_images(good, 40, 7, 7, 1);
  FILE *fp = fopen(good, "rb");
  assert_non_null(fp);
  unsigned char bytes[4096];
  size_t size = fread(bytes, 1, sizeof bytes, fp);
  fclose(fp);
  assert_true(size > 40 && size < sizeof bytes);
  write_raw(cut, bytes, size / 2);
  expect_bad_images(f, cut, KILN_ERROR_FORMAT, "IDX file");
}

static void test_bad_headers(void **state) {
  fixture *f = *state;
  const uint32_t dims[3] = {6, 2, 2};
  unsigned char pixels[24] = {0};
  char path[600];
  buffer b;

  idx_bytes(&b, 0x08, 3, dims, pixels, 24, 0);
  b.bytes[1] = 0x01; /* magic must be 00 00 */
  write_bad(f, "magic", &b, 0, path, sizeof path);
  expect_bad_images(f, path, KILN_ERROR_FORMAT, "not an IDX file");

  idx_bytes(&b, 0x0A, 3, dims, pixels, 24, 0); /* no such type */
  write_bad(f, "type", &b, 0, path, sizeof path);
  expect_bad_images(f, path, KILN_ERROR_FORMAT, "unknown element type 0x0A");

  idx_bytes(&b, 0x08, 0, dims, NULL, 0, 0);
  write_bad(f, "zero-dims", &b, 0, path, sizeof path);
  expect_bad_images(f, path, KILN_ERROR_FORMAT, "0 dimensions");

  const uint32_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  idx_bytes(&b, 0x08, 9, nine, pixels, 1, 0);
  write_bad(f, "nine-dims", &b, 0, path, sizeof path);
  expect_bad_images(f, path, KILN_ERROR_FORMAT, "9 dimensions");

  write_raw(path, "", 0);
  expect_bad_images(f, path, KILN_ERROR_FORMAT, "too short");

  /* Signed integer images are not features kiln batches; an i8 file is not
   * "wider than u8", as its message once said. */
  const unsigned char i32[24 * 4] = {0};
  idx_bytes(&b, 0x0C, 3, dims, i32, sizeof i32, 0);
  write_bad(f, "i32-images", &b, 0, path, sizeof path);
  expect_bad_images(f, path, KILN_ERROR_FORMAT, "u8 or float");
  idx_bytes(&b, 0x09, 3, dims, i32, 24, 0);
  write_bad(f, "i8-images", &b, 0, path, sizeof path);
  expect_bad_images(f, path, KILN_ERROR_FORMAT, "holds signed integers (i8, i16 or i32)");
}

/* 2^31 x 2^31 elements (and the largest dims there are) in a tiny file are
 * rejected before anything is allocated, raw and gzip. */
static void test_huge_dims(void **state) {
  fixture *f = *state;
  char path[600];
  buffer b;
  const uint32_t big[2] = {1u << 31, 1u << 31};
  const uint32_t max4[4] = {UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX};
  const unsigned char some[16] = {0};
  for (int gzip = 0; gzip < 2; ++gzip) {
    idx_bytes(&b, 0x08, 2, big, some, sizeof some, 0);
    write_bad(f, "huge", &b, gzip, path, sizeof path);
    expect_bad_images(f, path, KILN_ERROR_FORMAT, "[2147483648, 2147483648]");

    idx_bytes(&b, 0x0E, 4, max4, some, sizeof some, 0); /* overflows 64 bits */
    write_bad(f, "overflow", &b, gzip, path, sizeof path);
    expect_bad_images(f, path, KILN_ERROR_FORMAT, "64 bits");

    const uint32_t empty_but_huge[4] = {0, UINT32_MAX, UINT32_MAX, UINT32_MAX};
    idx_bytes(&b, 0x08, 4, empty_but_huge, NULL, 0, 0);
    write_bad(f, "empty-overflow", &b, gzip, path, sizeof path);
    expect_bad_images(f, path, KILN_ERROR_FORMAT, "64 bits");
  }
}

static void test_missing_and_unreadable(void **state) {
  fixture *f = *state;
  char path[600];
  path_in(f, "does-not-exist", path, sizeof path);
  expect_bad_images(f, path, KILN_ERROR_IO, "does-not-exist");
  expect_bad_images(f, path, KILN_ERROR_IO, "No such file");
  /* A directory is not an IDX file. */
  expect_bad_images(f, f->dir, KILN_ERROR_IO, "not a regular file");

  kiln_dataset *ds = NULL;
  assert_status(kiln_dataset_load_idx(f->ctx, NULL, path, &ds), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_dataset_load_idx(f->ctx, path, NULL, &ds), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_dataset_load_idx(NULL, path, path, &ds), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_dataset_load_idx(f->ctx, path, path, NULL), KILN_ERROR_INVALID_ARGUMENT);
}

static void test_files_disagree(void **state) {
  fixture *f = *state;
  char images[600], labels[600];
  path_in(f, "images", images, sizeof images);
  path_in(f, "labels", labels, sizeof labels);
  write_images(images, 5, 2, 2, 0);
  write_labels(labels, LABELS, 6, 0);
  kiln_dataset *ds = NULL;
  assert_status(kiln_dataset_load_idx(f->ctx, images, labels, &ds), KILN_ERROR_FORMAT);
  assert_last_error_contains("disagree on the number of samples");

  /* Labels must be 1-D integers: a 2-D file is rejected. */
  write_images(labels, 5, 1, 1, 0);
  assert_status(kiln_dataset_load_idx(f->ctx, images, labels, &ds), KILN_ERROR_FORMAT);
  assert_last_error_contains("one integer label per sample");

  /* A negative i8 label. */
  const unsigned char neg[5] = {1, 0xFF, 0, 0, 0};
  const uint32_t n = 5;
  buffer b;
  idx_bytes(&b, 0x09, 1, &n, neg, 5, 0);
  write_file(labels, &b, 0);
  assert_status(kiln_dataset_load_idx(f->ctx, images, labels, &ds), KILN_ERROR_FORMAT);
  assert_last_error_contains("negative label -1 at sample 1");
  assert_null(ds);
}

/* ---- MNIST-layout directories --------------------------------------------- */

static void test_mnist_dir(void **state) {
  fixture *f = *state;
  char path[600];
  path_in(f, "train-images-idx3-ubyte", path, sizeof path);
  write_images(path, 6, 3, 3, 0);
  path_in(f, "train-labels-idx1-ubyte", path, sizeof path);
  write_labels(path, LABELS, 6, 0);
  path_in(f, "t10k-images-idx3-ubyte.gz", path, sizeof path);
  write_images(path, 4, 3, 3, 1);
  path_in(f, "t10k-labels-idx1-ubyte.gz", path, sizeof path);
  write_labels(path, LABELS + 2, 4, 1);

  kiln_dataset *train = NULL, *test = NULL;
  assert_kiln_ok(kiln_dataset_load_mnist(f->ctx, f->dir, "train", &train));
  assert_kiln_ok(kiln_dataset_load_mnist(f->ctx, f->dir, "test", &test));
  int64_t v = 0;
  assert_kiln_ok(kiln_dataset_size(train, &v));
  assert_int_equal(v, 6);
  assert_kiln_ok(kiln_dataset_size(test, &v));
  assert_int_equal(v, 4);
  assert_kiln_ok(kiln_dataset_num_classes(test, &v));
  assert_int_equal(v, 5); /* labels 1, 4, 1, 2 */
  kiln_dataset_release(train);
  kiln_dataset_release(test);

  kiln_dataset *ds = NULL;
  assert_status(kiln_dataset_load_mnist(f->ctx, f->dir, "validation", &ds), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("\"train\" or \"test\"");

  path_in(f, "t10k-labels-idx1-ubyte.gz", path, sizeof path);
  assert_int_equal(remove(path), 0);
  assert_status(kiln_dataset_load_mnist(f->ctx, f->dir, "test", &ds), KILN_ERROR_IO);
  assert_last_error_contains("t10k-labels-idx1-ubyte.gz");

  path_in(f, "no-such-dir", path, sizeof path);
  assert_status(kiln_dataset_load_mnist(f->ctx, path, "train", &ds), KILN_ERROR_IO);
  assert_last_error_contains("no-such-dir");
  assert_null(ds);
}

/* ---- Fashion-MNIST -------------------------------------------------------- */

/* The first label and image, read here with zlib; pixels scaled to [0, 1]. */
static void read_first_sample(const char *dir, const char *prefix, int *label, double scaled[784]) {
  char path[600];
  unsigned char header[16], pixels[784];
  snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
  gzFile gz = gzopen(path, "rb");
  assert_non_null(gz);
  assert_int_equal(gzread(gz, header, 9), 9);
  gzclose(gz);
  *label = header[8];
  snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
  gz = gzopen(path, "rb");
  assert_non_null(gz);
  assert_int_equal(gzread(gz, header, 16), 16);
  assert_int_equal(gzread(gz, pixels, 784), 784);
  gzclose(gz);
  for (int i = 0; i < 784; ++i) scaled[i] = pixels[i] / 255.0;
}

static void test_fashion_mnist(void **state) {
  fixture *f = *state;
  struct stat st;
  if (stat(FASHION_DIR "/train-images-idx3-ubyte.gz", &st) != 0) skip();
  const struct {
    const char *split, *prefix;
    int64_t size;
  } splits[] = {{"train", "train", 60000}, {"test", "t10k", 10000}};
  for (int s = 0; s < 2; ++s) {
    kiln_dataset *ds = NULL;
    assert_kiln_ok(kiln_dataset_load_mnist(f->ctx, FASHION_DIR, splits[s].split, &ds));
    int64_t v = 0;
    assert_kiln_ok(kiln_dataset_size(ds, &v));
    assert_int_equal(v, splits[s].size);
    assert_kiln_ok(kiln_dataset_num_features(ds, &v));
    assert_int_equal(v, 784);
    assert_kiln_ok(kiln_dataset_num_classes(ds, &v));
    assert_int_equal(v, 10);

    int label;
    double want_x[784];
    read_first_sample(FASHION_DIR, splits[s].prefix, &label, want_x);
    kiln_tensor *x = NULL, *y = NULL;
    assert_kiln_ok(kiln_dataset_batch(ds, 0, 1, cpu, &x, &y));
    double got_label;
    kiln_test_read_f64(y, &got_label, 1);
    assert_int_equal((int)got_label, label);
    assert_tensor_close(x, want_x, 784, 1e-6, 0.0);
    kiln_tensor_release(x);
    kiln_tensor_release(y);
    kiln_dataset_release(ds);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_raw_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gzip_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gzip_detected_by_content, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wide_types, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncated_and_trailing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncated_gzip_stream, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_headers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_huge_dims, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_and_unreadable, setup, teardown),
      cmocka_unit_test_setup_teardown(test_files_disagree, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mnist_dir, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fashion_mnist, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
