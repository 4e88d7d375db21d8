// Backend::compile for CUDA: a step program (core/program.hpp) compiled into
// a CudaExecutable, with four independent parts of the fast path.
//
// cuBLASLt epilogues (kFastEpilogues). A Linear layer's product, bias and
// ReLU become one cuBLASLt call (RELU_BIAS, BIAS), and the backward's products
// carry the bias gradient (BGRADB on dW) and the ReLU gradient of the layer
// below (DRELU_BGRAD on dx, from the ReLU bit-mask its forward kept in an aux
// buffer the executable owns). GELU, tanh, sigmoid, leaky ReLU, f64, a kept
// pre-activation, or a product cuBLASLt has no algorithm for: that op runs
// as core's run_op kernels. choose_linear_engine (program.cpp) is the one
// place that decides, per op.
//
// cuDNN (kFastCudnn). Each Linear op outside a ReLU pair is timed once per
// shape against the path above and runs on cuDNN's fused graph where that is
// faster (cudnn_engine.hpp); describe() lists the choices.
//
// The narrow step (kFastNarrow). A training step of a one-hidden-layer f32
// MLP with at most 64 hidden units and 32 classes under cross-entropy (the
// tutorial's 784-32-10) runs its forward, loss and backward as two kernels
// of kiln's own (narrow_step.cu; planning/narrow_step.hpp says which steps),
// instead of the parts above; the gather and the optimizer stay kernels.
//
// CUDA graphs (kFastGraphs). The executable's kernels read one StepParams
// block it owns, `current`, instead of table + i. Each step begins with a
// one-thread kernel that copies table[*cursor] into `current` and advances
// the device-resident cursor; run(first, count) sets the cursor to `first`
// with one small uncaptured kernel and launches a graph of `count` steps
// (captured the first time that count is seen, a few counts cached, e.g. an
// epoch's full batches), or a one-step graph `count` times. The very first
// step an executable runs is eager, so that every kernel is loaded and every
// cuBLAS plan made outside any capture. Without graphs the same fused ops run
// eagerly, reading table + i.
#pragma once

#include <cstdint>
#include <memory>

#include "core/program.hpp"

namespace kiln::cuda {

class CudaBackend;

// Compiles `program` for device `index`, which must be current.
std::unique_ptr<Executable> compile_cuda(CudaBackend &backend, int64_t index, const StepProgram &program);

}  // namespace kiln::cuda
