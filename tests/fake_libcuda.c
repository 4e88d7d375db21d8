/* A stand-in for libcuda.so.1, for driver_probe_test and for the tests that
 * put its directory first on LD_LIBRARY_PATH (test_context's plugin cases,
 * test_no_gpu_cost.py). By default cuInit fails as a driver without a usable
 * GPU does (CUDA_ERROR_NO_DEVICE); with KILN_FAKE_CUDA_DEVICES=N it succeeds
 * and cuDeviceGetCount counts N, so the registry goes on to load the plugin. */
#include <stdlib.h>

static const char kNoDevice[] = "CUDA_ERROR_NO_DEVICE";
static const char kSuccess[] = "CUDA_SUCCESS";

__attribute__((visibility("default"))) int cuInit(unsigned int flags) {
  (void)flags;
  return getenv("KILN_FAKE_CUDA_DEVICES") ? 0 : 100;
}

__attribute__((visibility("default"))) int cuDeviceGetCount(int *count) {
  const char *devices = getenv("KILN_FAKE_CUDA_DEVICES");
  if (!count) return 1; /* CUDA_ERROR_INVALID_VALUE */
  *count = devices ? atoi(devices) : 0;
  return devices ? 0 : 3; /* CUDA_ERROR_NOT_INITIALIZED */
}

__attribute__((visibility("default"))) int cuGetErrorName(int error, const char **name) {
  if (error == 0) *name = kSuccess;
  else if (error == 100) *name = kNoDevice;
  else return 1; /* CUDA_ERROR_INVALID_VALUE */
  return 0;
}
