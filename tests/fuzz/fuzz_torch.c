/*
 * Fuzzes the torch.save reader (zip archive, restricted unpickler, strided
 * storages) through kiln_model_load_with_spec, kiln_model_load_weights and
 * kiln_model_load. The first byte chooses:
 *   bits 0-1  one of SPECS;
 *   bit 7     raw: the rest is the whole file (the zip reader's search);
 *             else built: the rest is a pickle and storages that the harness
 *             packs into a valid archive with correct CRCs, as torch.save
 *             lays it out, so that mutations reach the unpickler and the
 *             views instead of failing a CRC:
 *               2 bytes   little-endian length L of data.pkl
 *               L bytes   data.pkl
 *               then up to 8 storages data/0, data/1, ...: a 2-byte
 *               little-endian length n and n bytes each;
 *   bit 2     (built) byteorder "big" instead of "little".
 * Refusals may only be FORMAT, IO, SHAPE_MISMATCH or DTYPE_MISMATCH, with a
 * message under 2 KiB on one line; a model that loads runs a forward pass; a
 * failed load_weights leaves the model's weights as they were.
 */
#include "fuzz_support.h" /* first: it defines _GNU_SOURCE */

#include <string.h>

static const struct {
  const char *text;
  int64_t in, out;
} SPECS[] = {
    {"4-3-2", 4, 2},
    {"4-3-2:dropout=0.5:flatten", 4, 2},
    {"linear(4,3,nobias);relu;linear(3,2)", 4, 2},
    {"2-3-2-1:tanh", 2, 1},
};

static const kiln_status ALLOWED[] = {KILN_ERROR_FORMAT, KILN_ERROR_IO, KILN_ERROR_SHAPE_MISMATCH,
                                      KILN_ERROR_DTYPE_MISMATCH};

/* ---- a minimal zip writer (stored records, no zip64) */

typedef struct {
  uint8_t *data;
  size_t size, capacity;
} buffer;

static void put(buffer *b, const void *p, size_t n) {
  if (b->size + n > b->capacity) {
    b->capacity = 2 * (b->size + n);
    b->data = realloc(b->data, b->capacity);
    if (!b->data) kiln_fuzz_die("out of memory");
  }
  if (n) memcpy(b->data + b->size, p, n);
  b->size += n;
}

static void put_le(buffer *b, uint64_t v, int bytes) {
  uint8_t le[8];
  for (int i = 0; i < bytes; ++i) le[i] = (uint8_t)(v >> (8 * i));
  put(b, le, (size_t)bytes);
}

static uint32_t crc32_of(const uint8_t *p, size_t n) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

typedef struct {
  char name[32];
  const uint8_t *data;
  size_t size;
  size_t offset; /* of its local header */
} record;

static void zip_records(buffer *out, record *recs, int n) {
  for (int i = 0; i < n; ++i) {
    const size_t name_len = strlen(recs[i].name);
    const uint32_t crc = crc32_of(recs[i].data, recs[i].size);
    recs[i].offset = out->size;
    put_le(out, 0x04034b50, 4);
    put_le(out, 20, 2);
    put_le(out, 0, 2); /* flags */
    put_le(out, 0, 2); /* stored */
    put_le(out, 0, 4); /* time, date */
    put_le(out, crc, 4);
    put_le(out, recs[i].size, 4);
    put_le(out, recs[i].size, 4);
    put_le(out, name_len, 2);
    put_le(out, 0, 2);
    put(out, recs[i].name, name_len);
    put(out, recs[i].data, recs[i].size);
  }
  const size_t cd = out->size;
  for (int i = 0; i < n; ++i) {
    const size_t name_len = strlen(recs[i].name);
    put_le(out, 0x02014b50, 4);
    put_le(out, 20, 2);
    put_le(out, 20, 2);
    put_le(out, 0, 2);
    put_le(out, 0, 2);
    put_le(out, 0, 4);
    put_le(out, crc32_of(recs[i].data, recs[i].size), 4);
    put_le(out, recs[i].size, 4);
    put_le(out, recs[i].size, 4);
    put_le(out, name_len, 2);
    put_le(out, 0, 2); /* extra */
    put_le(out, 0, 2); /* comment */
    put_le(out, 0, 2); /* disk */
    put_le(out, 0, 2);
    put_le(out, 0, 4);
    put_le(out, recs[i].offset, 4);
    put(out, recs[i].name, name_len);
  }
  const size_t cd_size = out->size - cd;
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 4);
  put_le(out, (uint64_t)n, 2);
  put_le(out, (uint64_t)n, 2);
  put_le(out, cd_size, 4);
  put_le(out, cd, 4);
  put_le(out, 0, 2);
}

/* The archive a built-mode input describes, into out. */
static void build_archive(const uint8_t *data, size_t size, int big_endian, buffer *out) {
  record recs[3 + 8];
  int n = 0;
  size_t pickle_len = size >= 2 ? (size_t)(data[0] | (data[1] << 8)) : 0;
  size_t at = size >= 2 ? 2 : size;
  if (pickle_len > size - at) pickle_len = size - at;
  snprintf(recs[n].name, sizeof recs[n].name, "archive/data.pkl");
  recs[n].data = data + at;
  recs[n++].size = pickle_len;
  at += pickle_len;
  static const uint8_t version[] = "3\n";
  snprintf(recs[n].name, sizeof recs[n].name, "archive/version");
  recs[n].data = version;
  recs[n++].size = 2;
  snprintf(recs[n].name, sizeof recs[n].name, "archive/byteorder");
  recs[n].data = (const uint8_t *)(big_endian ? "big" : "little");
  recs[n++].size = big_endian ? 3 : 6;
  for (int k = 0; k < 8 && at < size; ++k) {
    size_t len = data[at++];
    if (at < size) len |= (size_t)data[at++] << 8;
    if (len > size - at) len = size - at;
    snprintf(recs[n].name, sizeof recs[n].name, "archive/data/%d", k);
    recs[n].data = data + at;
    recs[n++].size = len;
    at += len;
  }
  zip_records(out, recs, n);
}

static void expect_refusal(const char *call, kiln_status status) {
  kiln_fuzz_expect(call, status, ALLOWED, sizeof ALLOWED / sizeof ALLOWED[0]);
  if (status == KILN_OK) return;
  const char *message = kiln_last_error();
  if (strlen(message) >= 2048 || strchr(message, '\n')) {
    fprintf(stderr, "kiln fuzz harness: %s: a message of %zu bytes or of several lines: %.300s\n", call,
            strlen(message), message);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static kiln_fuzz_file file;
  if (!file.path[0]) kiln_fuzz_file_open(&file, "kiln-fuzz-torch");
  const uint8_t mode = data[0];
  buffer archive = {0};
  if (mode & 0x80) {
    kiln_fuzz_file_set(&file, data + 1, size - 1);
  } else {
    build_archive(data + 1, size - 1, (mode & 4) != 0, &archive);
    kiln_fuzz_file_set(&file, archive.data, archive.size);
  }
  kiln_context *ctx = kiln_fuzz_context();
  const kiln_device cpu = {KILN_DEVICE_CPU, -1};
  const size_t pick = mode & 3;

  kiln_model_spec *spec = NULL;
  if (kiln_model_spec_create(&spec) != KILN_OK || kiln_model_spec_parse(spec, SPECS[pick].text) != KILN_OK)
    kiln_fuzz_die(kiln_last_error());
  kiln_model *model = NULL;
  kiln_status status = kiln_model_load_with_spec(ctx, file.path, spec, cpu, &model);
  expect_refusal("kiln_model_load_with_spec", status);
  if (status != KILN_OK) {
    if (model) kiln_fuzz_die("kiln_model_load_with_spec failed but left *out set");
  } else {
    kiln_fuzz_check_loaded_model(ctx, model, SPECS[pick].in, SPECS[pick].out);
  }

  /* Into an existing f32 4-3-2 model: unchanged unless the load succeeds. */
  static kiln_model *target;
  if (!target) {
    kiln_model_spec *mlp = NULL;
    if (kiln_model_spec_create(&mlp) != KILN_OK || kiln_model_spec_parse(mlp, "4-3-2") != KILN_OK ||
        kiln_model_create(ctx, mlp, cpu, &target) != KILN_OK)
      kiln_fuzz_die(kiln_last_error());
    kiln_model_spec_release(mlp);
  }
  float before[23], after[23];
  kiln_fuzz_read_parameters(target, before, 23);
  status = kiln_model_load_weights(target, file.path);
  expect_refusal("kiln_model_load_weights", status);
  kiln_fuzz_read_parameters(target, after, 23);
  if (status != KILN_OK && memcmp(before, after, sizeof before) != 0)
    kiln_fuzz_die("a failed kiln_model_load_weights changed the weights");

  /* Without a spec: refused (no kiln metadata), its message describing the
   * state_dict's layers from whatever names and shapes it holds. */
  model = NULL;
  status = kiln_model_load(ctx, file.path, cpu, &model);
  expect_refusal("kiln_model_load", status);
  if (status == KILN_OK) kiln_model_release(model);

  kiln_model_spec_release(spec);
  free(archive.data);
  return 0;
}
