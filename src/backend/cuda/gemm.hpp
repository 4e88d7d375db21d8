// Matrix products of one device: cuBLASLt for f32 (exact fp32, or TF32 when
// GemmArgs::math asks) and f16/bf16 (f32 accumulate), cuBLAS for f64 and for
// the rare shape cuBLASLt finds no algorithm for. Plans (descriptors + the
// heuristic's algorithm) are cached per shape and math mode, so a training
// step makes no cuBLASLt set-up calls.
//
// Split-K: every plan restricts cuBLASLt's reduction schemes to "none" and
// "compute type". The other two (in place, output type) add the partial sums
// of a split-K product in the output's type: for f16/bf16 outputs that rounds
// every partial sum to 8 or 11 bits of mantissa, which is not the f32
// accumulation kiln promises.
//
// Fused products (Gemm::Fused) serve compiled step programs (program.hpp):
// one cuBLASLt call with a bias / ReLU / bias-gradient epilogue and every
// pointer bound when the program is compiled.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "backend/cuda/kernels.hpp"

namespace kiln::cuda {

// What a fused product does after the product itself, in cuBLASLt's terms
// (column-major D = the row-major output transposed; see gemm.cpp).
struct Epilogue {
  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  void *bias = nullptr;    // bias (read) or bias gradient (written)
  void *aux = nullptr;     // ReLU bit-mask: written by RELU_AUX*, read by DRELU*
  int64_t aux_ld = 0;      // in bits for the ReLU bit-mask: a multiple of 128
};

class Gemm {
 public:
  // Creates the handles and the workspace on the current device; `stream`
  // is the device's stream, on which every product is queued.
  explicit Gemm(cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm &) = delete;
  Gemm &operator=(const Gemm &) = delete;

  // Backend::gemm (row-major) on L.stream.
  void run(const Launch &L, const GemmArgs &args);

  class Fused;  // defined in gemm.cpp; shared_ptr deletes it there
  // The product `args` with `epilogue`, planned now, or null when cuBLASLt
  // has no algorithm for it (or args are f64, or a dimension is 0): the
  // caller then runs the unfused kernels. alpha 1, beta 0 only.
  std::shared_ptr<const Fused> fuse(const GemmArgs &args, const Epilogue &epilogue);
  void run(const Launch &L, const Fused &product);

 private:
  struct Plan;
  // dtype, math, trans_a, trans_b, m, n, k, the pointers' common alignment
  using Key = std::tuple<DType, MathMode, bool, bool, int64_t, int64_t, int64_t, uint32_t>;
  std::shared_ptr<const Plan> plan(const Key &key);
  void release() noexcept;  // frees whatever the constructor got so far

  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void *workspace_ = nullptr;
  std::mutex mutex_;       // guards plans_
  std::mutex blas_mutex_;  // the legacy handle's stream is set per call
  std::map<Key, std::shared_ptr<const Plan>> plans_;
};

}  // namespace kiln::cuda
