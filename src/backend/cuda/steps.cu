// The step cursor of a captured CUDA graph (program.cpp). A graph's kernels
// read one fixed StepParams block, `current`; the graph begins each step by
// copying the next table entry into it. The cursor lives on the device, so a
// graph of k steps can be launched again and again, each launch continuing
// where the last one stopped, and the host never reads or waits for it.
#include "backend/cuda/device_math.cuh"

namespace kiln::cuda {
namespace {

__global__ void set_cursor_kernel(int64_t *cursor, int64_t first) { *cursor = first; }

// One thread: a 32-byte copy and an increment, ordered before the step's other
// kernels by the stream (or the graph's edges).
__global__ void advance_step_kernel(const StepParams *table, int64_t *cursor, StepParams *current) {
  *current = table[*cursor];
  *cursor += 1;
}

}  // namespace

void set_cursor(const Launch &L, int64_t *cursor, int64_t first) {
  set_cursor_kernel<<<1, 1, 0, L.stream>>>(cursor, first);
  KILN_CUDA_LAUNCHED("set_cursor");
}

void advance_step(const Launch &L, const StepParams *table, int64_t *cursor, StepParams *current) {
  advance_step_kernel<<<1, 1, 0, L.stream>>>(table, cursor, current);
  KILN_CUDA_LAUNCHED("advance_step");
}

}  // namespace kiln::cuda
