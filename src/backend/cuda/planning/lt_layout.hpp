// How a row-major product of kiln's (GemmArgs) becomes a column-major one of
// cuBLAS and cuBLASLt: plain C++ without CUDA, in kiln_internal, so the CPU
// tests check it against a naive strided column-major product
// (tests/cuda_planning_test.cpp). gemm.cpp builds its matrix layouts and
// its legacy cublasGemmEx calls from it.
//
// A row-major C[m, n] is the column-major C^T[n, m], and C^T = op(B)^T
// op(A)^T, so cuBLAS gets B as its first operand and A as its second, with m
// and n swapped; a transposed kiln operand is a transposed cuBLAS operand.
// Each matrix is described as stored (before op): rows, columns and the
// leading dimension of its column-major view, which for kiln's contiguous
// row-major storage is its row length.
#pragma once

#include <cstdint>

#include "core/backend.hpp"

namespace kiln::cuda {

struct LtMatrix {
  int64_t rows = 0, cols = 0, ld = 0;  // column-major, as stored
};

struct LtProduct {
  bool trans_first = false, trans_second = false;  // cuBLAS's transa (on kiln's B), transb (on kiln's A)
  int64_t m = 0, n = 0, k = 0;                     // cuBLAS's: m = kiln's n, n = kiln's m
  LtMatrix first, second, out;                     // kiln's B, A and C as cuBLAS sees them
};

LtProduct lt_product(const GemmArgs &g);

}  // namespace kiln::cuda
