// The matrix products of one training step of an MLP, each as one plain
// cuBLAS call (cublasGemmEx: bf16 inputs, f32 accumulation), timed with CUDA
// events and printed as one JSON object on stdout. bench/run.py divides this
// step's GEMM time by kiln's whole step time for W's fraction_of_cublas.
//
//   cublas_gemm_bench [--spec 4096-4096-4096-4096-4096-10] [--batch 8192]
//                     [--reps 20] [--windows 7] [--device 0] [--seed S (ignored)]
//
// For every linear layer in -> out of the spec, at batch B (row-major, as
// PyTorch and kiln store them):
//   fwd  Y[B,out]  = X[B,in] . W[out,in]^T      (bf16 out)
//   dx   dX[B,in]  = dY[B,out] . W[out,in]      (bf16 out; not for the first
//                                                layer, whose input needs no gradient)
//   dw   dW[out,in] = dY[B,out]^T . X[B,in]     (f32 out: f32 gradients, as
//                                                kiln's and autocast's master weights)
// 2*m*n*k FLOPs each. Each product is timed alone (median over windows of
// reps calls) and the whole sequence back to back (step_seconds).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CUDA_CHECK(call)                                                                          \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "cublas_gemm_bench: %s: %s\n", #call, cudaGetErrorString(e_));         \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)
#define CUBLAS_CHECK(call)                                                                        \
  do {                                                                                            \
    cublasStatus_t s_ = (call);                                                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                            \
      std::fprintf(stderr, "cublas_gemm_bench: %s: status %d\n", #call, static_cast<int>(s_));    \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

namespace {

__global__ void fill_bf16(__nv_bfloat16 *p, size_t n, unsigned seed) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16((static_cast<float>(h & 0xffff) / 65536.0f - 0.5f) * 0.1f);
  }
}

struct Gemm {
  std::string name;
  cublasOperation_t ta, tb;
  int m, n, k, lda, ldb, ldc;
  const void *a, *b;
  void *c;
  cudaDataType_t ctype;
  double seconds = 0;
};

void run(cublasHandle_t h, const Gemm &g) {
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasGemmEx(h, g.ta, g.tb, g.m, g.n, g.k, &one, g.a, CUDA_R_16BF, g.lda, g.b, CUDA_R_16BF, g.ldb,
                            &zero, g.c, g.ctype, g.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

__nv_bfloat16 *alloc_bf16(size_t n, unsigned seed) {
  __nv_bfloat16 *p;
  CUDA_CHECK(cudaMalloc(&p, n * sizeof *p));
  fill_bf16<<<1024, 256>>>(p, n, seed);
  CUDA_CHECK(cudaGetLastError());
  return p;
}

template <class F>
double median_seconds(F f, int reps, int windows) {
  cudaEvent_t t0, t1;
  CUDA_CHECK(cudaEventCreate(&t0));
  CUDA_CHECK(cudaEventCreate(&t1));
  for (int i = 0; i < 3; ++i) f();  // warm-up: heuristics, workspace
  std::vector<double> w;
  for (int r = 0; r < windows; ++r) {
    CUDA_CHECK(cudaEventRecord(t0));
    for (int i = 0; i < reps; ++i) f();
    CUDA_CHECK(cudaEventRecord(t1));
    CUDA_CHECK(cudaEventSynchronize(t1));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
    w.push_back(ms * 1e-3 / reps);
  }
  std::sort(w.begin(), w.end());
  CUDA_CHECK(cudaEventDestroy(t0));
  CUDA_CHECK(cudaEventDestroy(t1));
  return w[w.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
  std::string spec = "4096-4096-4096-4096-4096-10";
  long batch = 8192;
  int reps = 20, windows = 7, device = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--spec")) spec = argv[i + 1];
    else if (!std::strcmp(argv[i], "--batch")) batch = std::atol(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--windows")) windows = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--device")) device = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seed")) continue;  // bench/run.py passes one to every run; no use here
    else {
      std::fprintf(stderr, "cublas_gemm_bench: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  std::vector<int> sizes;
  for (size_t pos = 0; pos < spec.size();) {
    size_t dash = spec.find('-', pos);
    sizes.push_back(std::atoi(spec.substr(pos, dash - pos).c_str()));
    pos = dash == std::string::npos ? spec.size() : dash + 1;
  }
  if (sizes.size() < 2 || batch < 1 || reps < 1 || windows < 1) {
    std::fprintf(stderr, "cublas_gemm_bench: bad --spec, --batch, --reps or --windows\n");
    return 2;
  }
  CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  cublasHandle_t h;
  CUBLAS_CHECK(cublasCreate(&h));

  const int B = static_cast<int>(batch);
  const size_t layers = sizes.size() - 1;
  std::vector<__nv_bfloat16 *> act(sizes.size()), grad(sizes.size()), weight(layers);
  std::vector<float *> wgrad(layers);
  for (size_t l = 0; l < sizes.size(); ++l) {
    act[l] = alloc_bf16(static_cast<size_t>(B) * sizes[l], 11 + l);
    grad[l] = alloc_bf16(static_cast<size_t>(B) * sizes[l], 101 + l);
  }
  for (size_t l = 0; l < layers; ++l) {
    weight[l] = alloc_bf16(static_cast<size_t>(sizes[l]) * sizes[l + 1], 1001 + l);
    CUDA_CHECK(cudaMalloc(&wgrad[l], static_cast<size_t>(sizes[l]) * sizes[l + 1] * sizeof(float)));
  }

  // Column-major cuBLAS over row-major tensors: a row-major [r, c] matrix is
  // a column-major [c, r] one with leading dimension c.
  std::vector<Gemm> gemms;
  for (size_t l = 0; l < layers; ++l) {
    const int in = sizes[l], out = sizes[l + 1];
    const std::string id = std::to_string(l + 1) + " (" + std::to_string(in) + "->" + std::to_string(out) + ")";
    gemms.push_back({"fwd " + id, CUBLAS_OP_T, CUBLAS_OP_N, out, B, in, in, in, out, weight[l], act[l], act[l + 1],
                     CUDA_R_16BF});
  }
  for (size_t l = layers; l-- > 0;) {
    const int in = sizes[l], out = sizes[l + 1];
    const std::string id = std::to_string(l + 1) + " (" + std::to_string(in) + "->" + std::to_string(out) + ")";
    gemms.push_back({"dw " + id, CUBLAS_OP_N, CUBLAS_OP_T, in, out, B, in, out, in, act[l], grad[l + 1], wgrad[l],
                     CUDA_R_32F});
    if (l > 0)
      gemms.push_back({"dx " + id, CUBLAS_OP_N, CUBLAS_OP_N, in, B, out, in, out, in, weight[l], grad[l + 1], grad[l],
                       CUDA_R_16BF});
  }
  CUDA_CHECK(cudaDeviceSynchronize());

  double flops = 0;
  for (Gemm &g : gemms) {
    g.seconds = median_seconds([&] { run(h, g); }, reps, windows);
    flops += 2.0 * g.m * g.n * g.k;
  }
  double step = median_seconds([&] { for (const Gemm &g : gemms) run(h, g); }, reps, windows);
  int cublas_version = 0;
  CUBLAS_CHECK(cublasGetVersion(h, &cublas_version));

  std::printf("{\"impl\": \"cublas\", \"api\": \"cublasGemmEx\", \"types\": \"bf16 in, f32 compute, bf16 out (dw f32 out)\", "
              "\"gpu\": \"%s\", \"cublas_version\": %d, \"spec\": \"%s\", \"batch\": %ld, \"gemms\": [",
              prop.name, cublas_version, spec.c_str(), batch);
  for (size_t i = 0; i < gemms.size(); ++i) {
    const Gemm &g = gemms[i];
    std::printf("%s{\"name\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"seconds\": %.8f, \"tflops\": %.1f}",
                i ? ", " : "", g.name.c_str(), g.m, g.n, g.k, g.seconds, 2.0 * g.m * g.n * g.k / g.seconds * 1e-12);
  }
  std::printf("], \"gemm_flops_per_step\": %.0f, \"step_seconds\": %.8f, \"tflops\": %.1f}\n", flops, step,
              flops / step * 1e-12);

  for (size_t l = 0; l < sizes.size(); ++l) {
    cudaFree(act[l]);
    cudaFree(grad[l]);
  }
  for (size_t l = 0; l < layers; ++l) {
    cudaFree(weight[l]);
    cudaFree(wgrad[l]);
  }
  cublasDestroy(h);
  return 0;
}
