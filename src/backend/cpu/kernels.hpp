// The CPU kernels behind CpuBackend (cpu_backend.cpp), one function per
// Backend method with the same meaning (see core/backend.hpp), plus the
// pool they run on. Grouped by file: elementwise.cpp, reduce.cpp, gemm.cpp
// (with sgemm_avx512.cpp), nn_kernels.cpp, optim.cpp. dtype_traits.hpp turns
// dtypes into template parameters; activation_math.hpp holds the activation
// formulas; vectorize.hpp gives the hot loops AVX-512 where the CPU has it.
//
// Parallelism: a kernel uses the pool only when its work is large enough to
// repay the hand-off (a few microseconds); small kernels run on the caller.
#pragma once

#include <cstdint>

#include "core/backend.hpp"
#include "core/thread_pool.hpp"

namespace kiln::cpu {

// Elements per chunk below which splitting a cheap elementwise loop does not
// pay: roughly 10-20 microseconds of work.
constexpr int64_t kElementwiseGrain = 32768;

// ---- elementwise.cpp ----
// Integer semantics: +, -, * and negation wrap (two's complement); division
// truncates toward zero, x / 0 = 0 and INT_MIN / -1 wraps to INT_MIN; Pow
// with a negative exponent gives the truncated quotient (0 unless the base is
// 1 or -1). Float -> integer casts truncate and saturate, NaN -> 0. Integer
// unary ops other than Neg, Abs, Relu, LeakyRelu and Identity compute in
// double and convert back that way. Maximum/Minimum propagate NaN.
void fill(ThreadPool &pool, const FillArgs &args);
void arange(ThreadPool &pool, const ArangeArgs &args);
void cast(ThreadPool &pool, const CastArgs &args);
void unary(ThreadPool &pool, const UnaryArgs &args);
void scalar(ThreadPool &pool, const ScalarArgs &args);
void binary(ThreadPool &pool, const BinaryArgs &args);

// ---- reduce.cpp ----
// Float sums accumulate in double; integer sums wrap; Max propagates NaN;
// Argmax gives the first index of the maximum (a NaN counts as the maximum).
void reduce(ThreadPool &pool, const ReduceArgs &args);
void softmax(ThreadPool &pool, const SoftmaxArgs &args);

// ---- gemm.cpp ----
// Configures OpenBLAS's threading once per process (see gemm.cpp).
void init_blas();
// MathMode::Tf32 is a CUDA mode: NOT_SUPPORTED here. bf16 products run on
// AVX-512 BF16 (bf16_gemm_avx512.hpp) where the CPU has it, else on f32
// copies of the operands; both multiply bf16 values exactly and accumulate
// in fp32.
void gemm(ThreadPool &pool, const GemmArgs &args);
// Which kernels run f32 products, process-wide: Auto (the default) the
// widest of kiln's own that the CPU has (AVX-512, else AVX2 + FMA) where
// they apply, OpenBLAS for the rest; Avx2 never AVX-512; Blas OpenBLAS
// alone. So a test can check each path on one CPU, or a wrong result be
// bisected.
enum class F32Products { Auto, Avx2, Blas };
void set_f32_products(F32Products which);

// Which of the two runs bf16 products, process-wide: Auto (the default)
// picks AVX-512 BF16 where the CPU has it; Convert always converts, so a
// test can compare the two on one CPU, or a wrong result be bisected.
enum class Bf16Products { Auto, Convert };
void set_bf16_products(Bf16Products how);

// ---- nn_kernels.cpp ----
void bias_act(ThreadPool &pool, const BiasActArgs &args);
void act_backward(ThreadPool &pool, const ActBackwardArgs &args);
void bias_grad(ThreadPool &pool, const BiasGradArgs &args);
// act_backward then bias_grad over the dx it wrote (bias.dy == act.dx, act.n
// == bias.rows * bias.cols, one dtype; else INTERNAL), in one pass: each row
// of dx is summed while it is still in the L1. The same bits as the two
// kernels. Apart, on two threads, bias_grad read half of dx from the other
// core's cache: 1.5% of a 784-1024-1024-10 step at batch 256, against 0.3%
// on one thread.
void act_backward_bias_grad(ThreadPool &pool, const ActBackwardArgs &act, const BiasGradArgs &bias);
void cross_entropy(ThreadPool &pool, const LossArgs &args);
void mse(ThreadPool &pool, const LossArgs &args);
void bce_with_logits(ThreadPool &pool, const LossArgs &args);
// seed: the mask's stream (see DropoutArgs).
void dropout(ThreadPool &pool, const DropoutArgs &args, uint64_t seed);
void dropout_backward(ThreadPool &pool, const DropoutBackwardArgs &args);
// rows: the order at the step's offset.
void gather(ThreadPool &pool, const GatherArgs &args, const int64_t *rows);
// shuffle.cpp: Backend::shuffle, a stable LSD radix sort of the keys.
void shuffle(int64_t n, uint64_t seed, int64_t *out);

// ---- optim.cpp ----
void clip_grad_norm(ThreadPool &pool, const ClipArgs &args);
void sgd_update(ThreadPool &pool, const SgdArgs &args, const StepParams &step);
void adam_update(ThreadPool &pool, const AdamArgs &args, const StepParams &step);

}  // namespace kiln::cpu
