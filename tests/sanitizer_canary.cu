// A planted bug per compute-sanitizer tool, so that a GPU run can tell "the
// sanitizer works here" from "kiln's code is clean" (scripts/gpu-check.sh's
// sanitize stage runs each mode under its tool and expects a report):
//
//   sanitizer_canary oob      a kernel writes one int past its allocation (memcheck)
//   sanitizer_canary race     threads read shared cells another warp writes, unsynchronised (racecheck)
//   sanitizer_canary uninit   a kernel reads device memory nothing wrote (initcheck)
//
// Without a sanitizer each mode runs to completion and exits 0 (the write
// lands in the allocation's padding); 77 without a usable CUDA device, 2 for
// a bad argument, 1 when a CUDA call fails.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

// In namespace kiln: gpu-check.sh has racecheck look at kernels whose names
// hold "kiln" only, so the race canary also proves the filter lets kiln's
// kernels through.
namespace kiln {
namespace {

__global__ void write_past_end(int *p, int n) { p[n] = 1; }

// Each thread reads the cell another warp writes, with no barrier between:
// a read-after-write hazard. (One cell written by all and read back, the
// first version, let the compiler forward the store and drop the shared
// access: on the H200 racecheck had nothing to see.)
__global__ void unsynchronised_shared(int *out) {
  __shared__ volatile int cells[64];
  cells[threadIdx.x] = int(threadIdx.x);
  out[threadIdx.x] = cells[(threadIdx.x + 32) % blockDim.x];
}

__global__ void read_unwritten(const int *in, int *out) { out[threadIdx.x] = in[threadIdx.x] + 1; }

bool ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "sanitizer_canary: %s failed: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace
}  // namespace kiln

using namespace kiln;

int main(int argc, char **argv) {
  if (argc != 2 || (std::strcmp(argv[1], "oob") && std::strcmp(argv[1], "race") && std::strcmp(argv[1], "uninit"))) {
    std::fprintf(stderr, "usage: sanitizer_canary oob|race|uninit\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no usable CUDA device\n");
    return 77;
  }
  const int n = 64;
  int *a = nullptr, *b = nullptr;
  if (!ok(cudaMalloc(&a, n * sizeof(int)), "cudaMalloc") || !ok(cudaMalloc(&b, n * sizeof(int)), "cudaMalloc"))
    return 1;
  if (!std::strcmp(argv[1], "oob")) write_past_end<<<1, 1>>>(a, n);
  else if (!std::strcmp(argv[1], "race")) unsynchronised_shared<<<1, n>>>(a);
  else read_unwritten<<<1, n>>>(a, b);
  const bool done = ok(cudaGetLastError(), "the launch") && ok(cudaDeviceSynchronize(), "the kernel");
  cudaFree(a);
  cudaFree(b);
  std::printf("sanitizer_canary %s: ran\n", argv[1]);
  return done ? 0 : 1;
}
