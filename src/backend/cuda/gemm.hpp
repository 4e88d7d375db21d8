// Matrix products of one device: cuBLASLt for f32 (exact fp32, no TF32) and
// f16/bf16 (f32 accumulate), cuBLAS for f64 and for the rare shape cuBLASLt
// finds no algorithm for. Plans (descriptors + the heuristic's algorithm) are
// cached per shape, so a training step makes no cuBLASLt set-up calls.
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

class Gemm {
 public:
  // Creates the handles and the workspace on the current device; `stream`
  // is the device's stream, on which every product is queued.
  explicit Gemm(cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm &) = delete;
  Gemm &operator=(const Gemm &) = delete;

  // Backend::gemm (row-major) on L.stream, which must be the constructor's.
  void run(const Launch &L, DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
           const void *a, const void *b, double beta, void *c);

 private:
  struct Plan;
  // dtype, trans_a, trans_b, m, n, k, the pointers' common alignment
  using Key = std::tuple<DType, bool, bool, int64_t, int64_t, int64_t, uint32_t>;
  std::shared_ptr<const Plan> plan(const Key &key);
  void release() noexcept;  // frees whatever the constructor got so far

  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void *workspace_ = nullptr;
  std::mutex mutex_;  // guards plans_
  std::map<Key, std::shared_ptr<const Plan>> plans_;
};

}  // namespace kiln::cuda
