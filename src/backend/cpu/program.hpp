// Backend::compile for the CPU: a step program (core/program.hpp) run as the
// plain sequence of kernels, with one fusion under kFastEpilogues, and a
// Linear layer's activation backward and bias gradient always in one pass
// (act_backward_bias_grad, the same bits as the two kernels). Each step runs
// on the thread pool or on the calling thread alone, as StepThreading
// (step_threading.hpp) chose by timing both: the same bits either way.
//
// Plain SGD folded into the weight-gradient products. Where the update is
// f32 SGD without momentum, and nothing between the backward and the update
// reads the gradients (no clipping, no allreduce, no mixed-precision casts),
// a Linear layer's update W = (1 - lr wd) W - lr dy^T x is one product into W
// (alpha = -lr, beta = 1 - lr wd, lr read from the step's StepParams), run
// after the layer's input-gradient product has read the old W. Its bias
// takes the usual SGD update from its gradient, and the program's SgdOp
// then has nothing left to do. On one core of the 784-1024-1024-10 step at
// batch 256, the separate update streamed 7 MiB of weights, their 7 MiB of
// gradients, and the gradients' writes, through memory (about 0.4 ms of a
// 14 ms step); fused, the weights go through once, under the products' FMAs.
//
// The results differ from the plain sequence by f32 rounding (the product's
// alpha * acc + beta * W against W - lr * dW): ~1e-7 relative per step. The
// gradient buffer then holds the biases' gradients only; nothing outside the
// step program reads it. Elements of the update that no layer's gradient
// covers (the flat buffer's padding between parameters: zeros, with zero
// gradients) are left as they are, as SGD would leave them.
//
// Not fused into the products: the bias and activation after a forward
// product, and the activation's backward and bias gradient around an
// input-gradient product. Done in the blocked kernel's tiles (tried on
// 2026-11-27, bit for bit the separate kernels' results), they saved nothing
// measurable on the 784-1024-1024-10 step at batch 256, on one thread or
// two: each of those passes over a [256, 1024] activation takes about 0.1%
// of the step, from the L2. Nor the output layer's input gradient (k = 10)
// into the layer below's activation backward and bias gradient, computed
// 8 rows at a time right before them (tried on 2026-11-27, gemm's kernel,
// the same bits): within noise on that step, on one thread and two
// (alternating runs), though apart it writes all of dy only for the next
// pass to read it back.
#pragma once

#include <cstdint>
#include <memory>

#include "core/program.hpp"
#include "core/thread_pool.hpp"

namespace kiln::cpu {

// backend: the CPU backend, whose kernels the executable calls; pool: its
// thread pool, for the kernels it calls directly.
std::unique_ptr<Executable> compile_cpu(Backend &backend, ThreadPool &pool, int64_t index,
                                        const StepProgram &program);

}  // namespace kiln::cpu
