// Which products of a step program run as cuBLASLt products with a fused
// epilogue: plain C++ over core's step ops, without CUDA, in kiln_internal,
// so the CPU tests run it (tests/cuda_planning_test.cpp). CudaExecutable
// (program.cpp) turns the plan into cuBLASLt calls.
//
// - A Linear with ReLU, or with only a bias, is one product with its
//   epilogue (RELU_BIAS / RELU / BIAS). GELU is not fused (cuBLASLt's GELU is
//   the tanh approximation, kiln's the exact erf one), nor are tanh,
//   sigmoid, leaky ReLU, f64 (legacy cuBLAS, no epilogues) or a layer that
//   keeps its pre-activation.
// - A ReLU layer whose backward directly follows the backward of the layer
//   above (only a gradient bucket's cast and allreduce start between, which
//   read gradients written before them) forms a pair: its forward writes the
//   ReLU bit-mask (RELU_AUX[_BIAS]) and the upper layer's dx product applies
//   the ReLU gradient and this layer's bias gradient (DRELU[_BGRAD]), so this
//   layer's backward finds dy already multiplied by relu' and db written.
// - Every other backward with a bias takes the bias gradient in its dW
//   product (BGRADB).
// try_fuse asks cuBLASLt's heuristic for each fused product; a product it
// refuses runs as plain products and kernels, and a pair needs both halves
// or neither is used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/program.hpp"

namespace kiln::cuda {

enum class EpilogueKind { Bias, Relu, ReluBias, ReluAux, ReluAuxBias, DRelu, DReluBgrad, BgradB };
enum class ProductKind { Forward, WeightGrad, InputGrad };
const char *epilogue_name(EpilogueKind kind);

// Who runs a Linear layer (forward or backward) without cuDNN: kiln's
// kernels (run_op) or cuBLASLt with an epilogue.
enum class LinearEngine { Kernels, CublasLt };
LinearEngine choose_linear_engine(const LinearOp &op, uint32_t fast_path);
LinearEngine choose_linear_backward_engine(const LinearBackwardOp &op, uint32_t fast_path);

// The ReLU bit-mask of a pair: cuBLAS's D is [out, rows] column-major, one
// bit per element, its leading dimension (in bits) a multiple of 128.
int64_t relu_mask_ld(int64_t out);
int64_t relu_mask_bytes(int64_t out, int64_t rows);

// A ReLU pair: ops[forward] writes the mask, ops[above]'s dx product reads
// it, ops[below] (ops[forward]'s backward) is left with the weight product.
struct ReluPair {
  size_t forward = 0, above = 0, below = 0;
  int64_t mask_ld = 0, mask_bytes = 0;
};
// The pairs the ops allow, before any heuristic is asked.
std::vector<ReluPair> find_relu_pairs(const std::vector<StepOp> &ops, uint32_t fast_path);

struct FusedProduct {
  size_t op = 0;  // index into the program's ops
  ProductKind product = ProductKind::Forward;
  EpilogueKind epilogue = EpilogueKind::Bias;
  int pair = -1;  // index into the plan's pairs for the two halves of a ReLU pair (they share its mask)
};

struct EpiloguePlan {
  std::vector<bool> used;               // per candidate pair: whether both halves got an algorithm
  std::vector<FusedProduct> products;   // every product that runs fused, in op order
  std::vector<bool> act_done;           // per op: a backward whose dy * relu' and db the op above did
  // The fused product of ops[op] of this kind, or null.
  const FusedProduct *find(size_t op, ProductKind kind) const;
};

// pairs: find_relu_pairs(ops, fast_path). try_fuse(p) returns whether
// cuBLASLt has an algorithm for p (the caller keeps what it planned, and the
// mask of pairs[p.pair] for the pair's halves).
EpiloguePlan plan_epilogues(const std::vector<StepOp> &ops, uint32_t fast_path, const std::vector<ReluPair> &pairs,
                            const std::function<bool(const FusedProduct &)> &try_fuse);

}  // namespace kiln::cuda
