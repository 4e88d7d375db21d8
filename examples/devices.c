/* What the PyTorch GPU tutorials print first, with kiln:
 *
 *   torch.cuda.is_available()      -> kiln_cuda_is_available
 *   torch.cuda.device_count()      -> kiln_device_count
 *   torch.cuda.current_device()    -> kiln_default_device
 *   torch.cuda.get_device_name(0)  -> kiln_device_get_info(...).name
 */
#include <stdio.h>
#include <stdlib.h>

#include <kiln/kiln.h>

#define CHECK(call)                                                                   \
  do {                                                                                \
    if ((call) != KILN_OK) {                                                          \
      fprintf(stderr, "%s failed: %s\n", #call, kiln_last_error());                   \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

int main(void) {
  kiln_context *ctx = NULL;
  CHECK(kiln_context_create(NULL, &ctx));

  int available = 0;
  int64_t count = 0;
  CHECK(kiln_cuda_is_available(ctx, &available));
  CHECK(kiln_device_count(ctx, KILN_DEVICE_CUDA, &count));
  printf("CUDA available: %s\n", available ? "yes" : "no");
  if (!available) {
    const char *reason = NULL;
    CHECK(kiln_cuda_unavailable_reason(ctx, &reason));
    printf("  why not: %s\n", reason);
  }
  printf("CUDA devices: %lld\n", (long long)count);

  /* "auto": the first GPU when there is one, else the CPU. */
  kiln_device device;
  char name[32];
  CHECK(kiln_default_device(ctx, &device));
  CHECK(kiln_device_format(device, name, sizeof name));
  printf("default device: %s\n", name);

  for (int64_t i = 0; i < count; i++) {
    kiln_device gpu = {KILN_DEVICE_CUDA, i};
    kiln_device_info info = {.struct_size = sizeof info};
    CHECK(kiln_device_get_info(ctx, gpu, &info));
    printf("cuda:%lld: %s, %.1f GiB\n", (long long)i, info.name, info.total_memory / 1073741824.0);
  }
  kiln_device cpu = {KILN_DEVICE_CPU, -1};
  kiln_device_info info = {.struct_size = sizeof info};
  CHECK(kiln_device_get_info(ctx, cpu, &info));
  printf("cpu: %s, %lld cores\n", info.name, (long long)info.multiprocessor_count);

  kiln_context_release(ctx);
  return 0;
}
