/*
 * Shared pieces of kiln's fuzz harnesses (tests/fuzz/fuzz_*.c).
 *
 * Each harness defines LLVMFuzzerTestOneInput. Built with clang
 * -fsanitize=fuzzer it is a libFuzzer target; built with replay_main.c by any
 * C compiler it replays corpus files, which is how CTest checks the seeds.
 *
 * kiln reads files by path, so the input is written to a memfd and handed
 * over as /proc/self/fd/N: no disk traffic, nothing left behind.
 */
#ifndef KILN_FUZZ_SUPPORT_H
#define KILN_FUZZ_SUPPORT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kiln/kiln.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A memory file that can be rewritten for every input. */
typedef struct kiln_fuzz_file {
  int fd;
  char path[64];
} kiln_fuzz_file;

static void kiln_fuzz_die(const char *what) {
  fprintf(stderr, "kiln fuzz harness: %s\n", what);
  abort();
}

static void kiln_fuzz_file_open(kiln_fuzz_file *f, const char *name) {
  f->fd = memfd_create(name, MFD_CLOEXEC);
  if (f->fd < 0) kiln_fuzz_die("memfd_create failed");
  snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}

/* Replaces the file's contents with data[0..size). */
static void kiln_fuzz_file_set(kiln_fuzz_file *f, const uint8_t *data, size_t size) {
  if (ftruncate(f->fd, 0) != 0) kiln_fuzz_die("ftruncate failed");
  size_t done = 0;
  while (done < size) {
    ssize_t n = pwrite(f->fd, data + done, size - done, (off_t)done);
    if (n <= 0) kiln_fuzz_die("pwrite failed");
    done += (size_t)n;
  }
}

/* A CPU-only context, quiet, one thread, made once per process. */
static kiln_context *kiln_fuzz_context(void) {
  static kiln_context *ctx;
  if (ctx) return ctx;
  kiln_context_options *options = NULL;
  if (kiln_context_options_create(&options) != KILN_OK || kiln_context_options_set_enable_cuda(options, 0) != KILN_OK ||
      kiln_context_options_set_num_threads(options, 1) != KILN_OK ||
      kiln_context_options_set_log_level(options, KILN_LOG_OFF) != KILN_OK || kiln_context_create(options, &ctx) != KILN_OK)
    kiln_fuzz_die(kiln_last_error());
  kiln_context_options_release(options);
  return ctx;
}

/* The longest message kiln_last_error() may return (kiln.h). */
#define KILN_FUZZ_MAX_MESSAGE 1024

/* Aborts (a crash to libFuzzer, a failure to CTest) unless status is KILN_OK
 * or one of the n statuses in allowed: an untrusted file may be rejected, but
 * only with a status that says it is the file's fault, and a message of at
 * most 1 KiB whatever the input quotes. */
static void kiln_fuzz_expect(const char *call, kiln_status status, const kiln_status *allowed, size_t n) {
  if (status == KILN_OK) return;
  if (strlen(kiln_last_error()) > KILN_FUZZ_MAX_MESSAGE) {
    fprintf(stderr, "kiln fuzz harness: %s returned a message of %zu bytes\n", call, strlen(kiln_last_error()));
    abort();
  }
  for (size_t i = 0; i < n; ++i)
    if (status == allowed[i]) return;
  fprintf(stderr, "kiln fuzz harness: %s returned %s: %s\n", call, kiln_status_name(status), kiln_last_error());
  abort();
}

/* A model a loader accepted must run: a forward pass of 3 rows of `in`
 * features gives 3 rows of `out` logits. Releases the model. */
static void kiln_fuzz_check_loaded_model(kiln_context *ctx, kiln_model *model, int64_t in, int64_t out) {
  const kiln_device cpu = {KILN_DEVICE_CPU, -1};
  const int64_t x_shape[2] = {3, in};
  int64_t out_shape[2] = {0, 0};
  kiln_tensor *x = NULL, *y = NULL;
  if (kiln_tensor_zeros(ctx, x_shape, 2, KILN_F32, cpu, &x) != KILN_OK || kiln_model_forward(model, x, &y) != KILN_OK ||
      kiln_tensor_shape(y, out_shape, 2) != KILN_OK)
    kiln_fuzz_die(kiln_last_error());
  if (out_shape[0] != 3 || out_shape[1] != out) kiln_fuzz_die("a loaded model has another output size");
  kiln_tensor_release(y);
  kiln_tensor_release(x);
  kiln_model_release(model);
}

/* Copies an f32 model's parameters, in order, into out[capacity]; dies
 * unless the model has exactly capacity of them. */
static void kiln_fuzz_read_parameters(kiln_model *model, float *out, int64_t capacity) {
  int64_t tensors = 0, done = 0;
  if (kiln_model_num_parameter_tensors(model, &tensors) != KILN_OK) kiln_fuzz_die(kiln_last_error());
  for (int64_t i = 0; i < tensors; ++i) {
    kiln_tensor *p = NULL;
    int64_t numel = 0;
    if (kiln_model_parameter(model, i, &p) != KILN_OK || kiln_tensor_numel(p, &numel) != KILN_OK ||
        done + numel > capacity || kiln_tensor_copy_to_host(p, out + done, numel * (int64_t)sizeof(float)) != KILN_OK)
      kiln_fuzz_die("cannot read a model's parameters");
    kiln_tensor_release(p);
    done += numel;
  }
  if (done != capacity) kiln_fuzz_die("a model has another parameter count than expected");
}

#endif /* KILN_FUZZ_SUPPORT_H */
