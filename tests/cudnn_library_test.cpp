// The CUDA plugin's cuDNN loader (src/backend/cuda/cudnn_library.cpp), which
// needs no GPU. KILN_TEST_CUDNN_EXPECT says what this run must find:
// "usable" (the library loads, is cuDNN 9 and has every function kiln uses),
// or a text the reason for an unusable library must contain (then no
// function may be left resolved). Every run also checks which status a
// failed cuDNN call becomes (allocation failures are OUT_OF_MEMORY).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/cuda/cudnn_library.hpp"

int main() {
  using kiln::cuda::status_of;
  if (status_of(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED) != KILN_ERROR_OUT_OF_MEMORY ||
      status_of(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) != KILN_ERROR_OUT_OF_MEMORY ||
      status_of(cudnnStatus_t(4000 + 3)) != KILN_ERROR_OUT_OF_MEMORY ||  // CUDNN_STATUS_ALLOC_FAILED, deprecated
      status_of(CUDNN_STATUS_BAD_PARAM) != KILN_ERROR_BACKEND ||
      status_of(CUDNN_STATUS_EXECUTION_FAILED) != KILN_ERROR_BACKEND ||
      status_of(CUDNN_STATUS_NOT_SUPPORTED) != KILN_ERROR_BACKEND) {
    std::fprintf(stderr, "FAIL: a cuDNN status maps to the wrong kiln_status\n");
    return 1;
  }
  const kiln::cuda::CudnnLibrary &l = kiln::cuda::cudnn_library();
  const char *expect = std::getenv("KILN_TEST_CUDNN_EXPECT");
  std::printf("cuDNN version %zu, reason \"%s\"\n", l.version, l.reason.c_str());
  if (!expect) {
    std::fprintf(stderr, "set KILN_TEST_CUDNN_EXPECT\n");
    return 2;
  }
  if (std::string(expect) == "usable")
    return l.reason.empty() && l.version / 10000 == 9 && l.api.Create && l.api.SoftmaxForward ? 0 : 1;
  return l.reason.find(expect) != std::string::npos && !l.api.Create && l.version == 0 ? 0 : 1;
}
