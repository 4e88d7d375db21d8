// Wider vectors for the hot loops without building libkiln for one CPU:
// vectorized(fn) runs fn with its loops compiled for AVX-512 when the CPU
// has it, else for AVX2 when it has that, else as built for the x86-64
// baseline (SSE2).
//
// How: run_avx512 is compiled for AVX-512 and `flatten` inlines fn (and
// what it calls) into it, so GCC's vectoriser, which runs after inlining,
// sees fn's loops under the AVX-512 target and uses 16-lane vectors there.
// Results may differ from the baseline build in the last bit (FMA
// contraction), never in meaning. run_avx2 is the same for 8 lanes, but
// without FMA, so its results are the baseline's bit for bit (models
// trained with seven configurations of optimizer, activation and precision
// saved identical files): on an AVX2-only Zen 3, the tutorial step's SGD
// update took 6.3 us instead of 9.9, its bias gradient 1.3 instead of 2.0
// (bench/kiln_cpu_kernels_bench 1 128), without moving the values the
// tests hold that CPU to.
#pragma once

#include "backend/cpu/cpu_features.hpp"

namespace kiln::cpu {

#if defined(__x86_64__)
template <class F>
__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,prefer-vector-width=512"), flatten)) void run_avx512(
    const F &fn) {
  fn();
}

template <class F>
__attribute__((target("avx2"), flatten)) void run_avx2(const F &fn) {
  fn();
}

template <class F>
inline void vectorized(const F &fn) {
  const LoopVectors which = loop_vectors();
  if (which == LoopVectors::Auto && avx512_available()) run_avx512(fn);
  else if (which != LoopVectors::Baseline && avx2_fma_available()) run_avx2(fn);
  else fn();
}
#else
template <class F>
inline void vectorized(const F &fn) {
  fn();
}
#endif

}  // namespace kiln::cpu
