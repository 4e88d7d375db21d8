/* A stand-in for libcuda.so.1 whose cuInit fails as a driver without a usable
 * GPU does (CUDA_ERROR_NO_DEVICE), for driver_probe_test. */
static const char kNoDevice[] = "CUDA_ERROR_NO_DEVICE";

__attribute__((visibility("default"))) int cuInit(unsigned int flags) {
  (void)flags;
  return 100;
}

__attribute__((visibility("default"))) int cuGetErrorName(int error, const char **name) {
  if (error != 100) return 1; /* CUDA_ERROR_INVALID_VALUE */
  *name = kNoDevice;
  return 0;
}
