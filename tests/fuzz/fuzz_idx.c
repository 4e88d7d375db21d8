/*
 * Fuzzes the IDX reader (raw and gzip) through kiln_dataset_load_idx, once
 * with the input as the image file and a valid label file, once with the
 * input as the label file and a valid image file. The valid companion holds
 * as many samples as the input's header claims (up to MAX_SAMPLES), so
 * inputs get past the sample-count check into the dataset itself. A
 * malformed file may only be rejected with FORMAT, IO or SHAPE_MISMATCH.
 */
#include "fuzz_support.h" /* first: it defines _GNU_SOURCE */

#include <string.h>

#define MAX_SAMPLES 1024
#define IMAGE_ROWS 2
#define IMAGE_COLS 2

/* The first dimension an IDX header claims, clamped to [1, MAX_SAMPLES];
 * 1 when the input is too short to say (or gzip: the header is compressed). */
static uint32_t claimed_samples(const uint8_t *data, size_t size) {
  if (size < 8) return 1;
  uint32_t n = (uint32_t)data[4] << 24 | (uint32_t)data[5] << 16 | (uint32_t)data[6] << 8 | data[7];
  return n < 1 ? 1 : n > MAX_SAMPLES ? MAX_SAMPLES : n;
}

/* A valid u8 IDX file: n labels (ndim 1), or n images of IMAGE_ROWS x IMAGE_COLS (ndim 3). */
static size_t make_idx(uint8_t *out, uint32_t n, int images) {
  const uint8_t header[] = {0, 0, 0x08, images ? 3 : 1, n >> 24, n >> 16 & 0xff, n >> 8 & 0xff, n & 0xff,
                            0, 0, 0, IMAGE_ROWS, 0, 0, 0, IMAGE_COLS};
  const size_t header_size = images ? 16 : 8, per_sample = images ? IMAGE_ROWS * IMAGE_COLS : 1;
  memcpy(out, header, header_size);
  for (size_t i = 0; i < n * per_sample; ++i) out[header_size + i] = (uint8_t)(i % 10);
  return header_size + n * per_sample;
}

static void load(const char *images, const char *labels) {
  static const kiln_status allowed[] = {KILN_ERROR_FORMAT, KILN_ERROR_IO, KILN_ERROR_SHAPE_MISMATCH};
  kiln_dataset *dataset = NULL;
  kiln_status status = kiln_dataset_load_idx(kiln_fuzz_context(), images, labels, &dataset);
  kiln_fuzz_expect("kiln_dataset_load_idx", status, allowed, 3);
  if (status != KILN_OK) {
    if (dataset) kiln_fuzz_die("kiln_dataset_load_idx failed but left *out set");
    return;
  }
  int64_t n = 0, features = 0, classes = 0;
  if (kiln_dataset_size(dataset, &n) != KILN_OK || n < 1 || kiln_dataset_num_features(dataset, &features) != KILN_OK ||
      features < 0 || kiln_dataset_num_classes(dataset, &classes) != KILN_OK || classes < 1)
    kiln_fuzz_die("a loaded dataset reports an impossible size, feature or class count");
  kiln_dataset_release(dataset);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static kiln_fuzz_file input, companion;
  static uint8_t valid[16 + MAX_SAMPLES * IMAGE_ROWS * IMAGE_COLS];
  if (!input.path[0]) {
    kiln_fuzz_file_open(&input, "kiln-fuzz-idx-input");
    kiln_fuzz_file_open(&companion, "kiln-fuzz-idx-companion");
  }
  kiln_fuzz_file_set(&input, data, size);
  const uint32_t n = claimed_samples(data, size);

  kiln_fuzz_file_set(&companion, valid, make_idx(valid, n, 0));
  load(input.path, companion.path);
  kiln_fuzz_file_set(&companion, valid, make_idx(valid, n, 1));
  load(companion.path, input.path);
  return 0;
}
