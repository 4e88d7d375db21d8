/* A program that uses an installed kiln the way a user's would: create a
 * context and a tensor, read the tensor back, print OK. */
#include <stdio.h>

#include <kiln/kiln.h>

int main(void) {
  if (kiln_abi_version() != KILN_ABI_VERSION) {
    fprintf(stderr, "libkiln ABI %d, header ABI %d\n", kiln_abi_version(), KILN_ABI_VERSION);
    return 1;
  }
  kiln_context *ctx = NULL;
  if (kiln_context_create(NULL, &ctx) != KILN_OK) {
    fprintf(stderr, "kiln_context_create: %s\n", kiln_last_error());
    return 1;
  }
  const int64_t shape[] = {2, 3};
  const kiln_device cpu = {KILN_DEVICE_CPU, -1};
  kiln_tensor *t = NULL;
  float values[6] = {0};
  int ok = kiln_tensor_full(ctx, shape, 2, KILN_F32, cpu, 1.5, &t) == KILN_OK &&
           kiln_tensor_copy_to_host(t, values, sizeof values) == KILN_OK;
  if (!ok) fprintf(stderr, "tensor: %s\n", kiln_last_error());
  for (int i = 0; ok && i < 6; ++i) {
    if (values[i] != 1.5f) {
      fprintf(stderr, "element %d is %g, expected 1.5\n", i, values[i]);
      ok = 0;
    }
  }
  kiln_tensor_release(t);
  kiln_context_release(ctx);
  if (!ok) return 1;
  printf("OK kiln %s\n", kiln_version_string());
  return 0;
}
