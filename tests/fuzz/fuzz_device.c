/*
 * Fuzzes kiln_device_parse, without a context (syntax only) and with a
 * CPU-only one ("auto" must give the CPU, "cuda:N" DEVICE_UNAVAILABLE). The
 * input is the text up to its first NUL. Malformed text may only give
 * INVALID_ARGUMENT; whatever parses must be formatted by kiln_device_format
 * into a string that parses back to the same device (the round trip of
 * issue 12 item 5).
 */
#include "fuzz_support.h" /* first: it defines _GNU_SOURCE */

#include <string.h>

static void round_trip(kiln_device device) {
  char buf[64];
  kiln_device again = {KILN_DEVICE_CPU, -2};
  if (kiln_device_format(device, buf, sizeof buf) != KILN_OK) kiln_fuzz_die("a parsed device does not format");
  if (kiln_device_parse(NULL, buf, &again) != KILN_OK) kiln_fuzz_die("a formatted device does not parse");
  if (again.kind != device.kind || again.index != device.index) kiln_fuzz_die("device format/parse disagree");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) kiln_fuzz_die("out of memory");
  memcpy(text, data, size);
  text[size] = '\0';

  static const kiln_status syntax[] = {KILN_ERROR_INVALID_ARGUMENT};
  kiln_device device = {KILN_DEVICE_CPU, -1};
  kiln_status status = kiln_device_parse(NULL, text, &device);
  /* "auto" needs a context: without one it is an INVALID_ARGUMENT. */
  kiln_fuzz_expect("kiln_device_parse(NULL, ...)", status, syntax, 1);
  if (status == KILN_OK) round_trip(device);

  static const kiln_status with_context[] = {KILN_ERROR_INVALID_ARGUMENT, KILN_ERROR_DEVICE_UNAVAILABLE};
  status = kiln_device_parse(kiln_fuzz_context(), text, &device);
  kiln_fuzz_expect("kiln_device_parse(ctx, ...)", status, with_context, 2);
  if (status == KILN_OK) {
    /* The fuzz context has CUDA disabled: only the CPU is usable. */
    if (device.kind != KILN_DEVICE_CPU) kiln_fuzz_die("a CPU-only context parsed a CUDA device as usable");
    round_trip(device);
  }
  free(text);
  return 0;
}
