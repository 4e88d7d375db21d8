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
void fill(ThreadPool &pool, DType t, int64_t n, void *out, double value);
void arange(ThreadPool &pool, DType t, int64_t n, void *out, double start, double step);
void cast(ThreadPool &pool, DType from, const void *in, DType to, void *out, int64_t n);
void unary(ThreadPool &pool, UnaryOp op, DType t, int64_t n, const void *in, void *out, double alpha);
void scalar(ThreadPool &pool, BinaryOp op, DType t, int64_t n, const void *a, double s, void *out);
void binary(ThreadPool &pool, BinaryOp op, DType t, const Broadcast &bc, const void *a, const void *b, void *out);

// ---- reduce.cpp ----
// Float sums accumulate in double; integer sums wrap; Max propagates NaN;
// Argmax gives the first index of the maximum (a NaN counts as the maximum).
void reduce(ThreadPool &pool, ReduceOp op, DType t, int64_t outer, int64_t n, int64_t inner, const void *in,
            void *out);
void softmax(ThreadPool &pool, DType t, int64_t outer, int64_t n, int64_t inner, const void *in, void *out, bool log);

// ---- gemm.cpp ----
// Configures OpenBLAS's threading once per process (see gemm.cpp).
void init_blas();
// MathMode::Tf32 is a CUDA mode: NOT_SUPPORTED here.
void gemm(ThreadPool &pool, const GemmArgs &args);

// ---- nn_kernels.cpp ----
void bias_act(ThreadPool &pool, DType t, int64_t rows, int64_t cols, void *y, const void *bias, UnaryOp act,
              double alpha, void *pre);
void act_backward(ThreadPool &pool, DType t, int64_t n, UnaryOp act, double alpha, const void *dy, const void *pre,
                  const void *y, void *dx);
void bias_grad(ThreadPool &pool, DType t, int64_t rows, int64_t cols, const void *dy, void *db, double beta);
void cross_entropy(ThreadPool &pool, DType t, int64_t rows, int64_t cols, const void *logits, const int64_t *labels,
                   double grad_scale, void *dlogits, double *stats);
void mse(ThreadPool &pool, DType t, int64_t n, const void *pred, const void *target, double grad_scale, void *dpred,
         double *stats);
void bce_with_logits(ThreadPool &pool, DType t, int64_t n, const void *logits, const void *target, double grad_scale,
                     void *dlogits, double *stats);
// seed: the mask's stream (see DropoutArgs).
void dropout(ThreadPool &pool, const DropoutArgs &args, uint64_t seed);
void dropout_backward(ThreadPool &pool, DType t, int64_t n, const void *dy, const uint8_t *mask, double p, void *dx);
// rows: the order at the step's offset.
void gather(ThreadPool &pool, const GatherArgs &args, const int64_t *rows);
// shuffle.cpp: Backend::shuffle, a stable LSD radix sort of the keys.
void shuffle(int64_t n, uint64_t seed, int64_t *out);

// ---- optim.cpp ----
void clip_grad_norm(ThreadPool &pool, DType t, int64_t n, void *grads, double max_norm, double *scratch);
void sgd_update(ThreadPool &pool, const SgdArgs &args, const StepParams &step);
void adam_update(ThreadPool &pool, const AdamArgs &args, const StepParams &step);

}  // namespace kiln::cpu
