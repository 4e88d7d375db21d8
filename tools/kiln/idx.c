#include "idx.h"

#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

/* Larger inputs than this are surely not an image file meant for predict. */
#define MAX_IDX_BYTES ((int64_t)1 << 32)

static int read_exact(gzFile f, void *buf, int64_t n) {
  unsigned char *p = buf;
  while (n > 0) {
    unsigned chunk = n > (1 << 30) ? (1u << 30) : (unsigned)n;
    int got = gzread(f, p, chunk);
    if (got <= 0) return -1;
    p += got;
    n -= got;
  }
  return 0;
}

static int64_t be32(const unsigned char *b) {
  return ((int64_t)b[0] << 24) | ((int64_t)b[1] << 16) | ((int64_t)b[2] << 8) | (int64_t)b[3];
}

int idx_read_images(kiln_context *ctx, const char *path, kiln_tensor **out, char *err, size_t err_size) {
  *out = NULL;
  gzFile f = gzopen(path, "rb"); /* reads uncompressed files as they are */
  if (!f) {
    snprintf(err, err_size, "cannot open '%s'", path);
    return -1;
  }
  int rc = -1;
  float *data = NULL;
  unsigned char *raw = NULL;
  unsigned char head[4];
  if (read_exact(f, head, 4) != 0 || head[0] != 0 || head[1] != 0) {
    snprintf(err, err_size, "'%s' is not an IDX file", path);
    goto done;
  }
  if (head[2] != 0x08 || head[3] < 1) {
    snprintf(err, err_size, "'%s' does not hold unsigned bytes (IDX type 0x%02x, want 0x08 images)", path, head[2]);
    goto done;
  }
  int64_t count = 0, features = 1;
  for (int d = 0; d < head[3]; d++) {
    unsigned char b[4];
    if (read_exact(f, b, 4) != 0) {
      snprintf(err, err_size, "'%s' ends inside its header", path);
      goto done;
    }
    int64_t dim = be32(b);
    if (d == 0) {
      count = dim;
    } else if (dim == 0 || features > MAX_IDX_BYTES / dim) {
      snprintf(err, err_size, "'%s' has an unusable dimension %lld", path, (long long)dim);
      goto done;
    } else {
      features *= dim;
    }
  }
  if (count == 0 || count > MAX_IDX_BYTES / features) {
    snprintf(err, err_size, "'%s' holds %lld samples of %lld values: nothing to predict or too large", path,
             (long long)count, (long long)features);
    goto done;
  }
  int64_t n = count * features;
  raw = malloc((size_t)n);
  data = malloc((size_t)n * sizeof *data);
  if (!raw || !data) {
    snprintf(err, err_size, "out of memory reading '%s'", path);
    goto done;
  }
  if (read_exact(f, raw, n) != 0) {
    snprintf(err, err_size, "'%s' is shorter than its header says (%lld x %lld bytes)", path, (long long)count,
             (long long)features);
    goto done;
  }
  for (int64_t i = 0; i < n; i++) data[i] = raw[i] / 255.0f;
  int64_t shape[2] = {count, features};
  kiln_device cpu = {KILN_DEVICE_CPU, -1};
  if (kiln_tensor_from_host(ctx, data, n * (int64_t)sizeof *data, shape, 2, KILN_F32, cpu, out) != KILN_OK) {
    snprintf(err, err_size, "%s", kiln_last_error());
    goto done;
  }
  rc = 0;
done:
  free(raw);
  free(data);
  gzclose(f);
  return rc;
}
