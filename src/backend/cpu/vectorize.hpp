// Wider vectors for the hot loops without building libkiln for one CPU:
// vectorized(fn) runs fn with its loops compiled for AVX-512 when the CPU
// has it, else as built for the x86-64 baseline (SSE2).
//
// How: run_avx512 is compiled for AVX-512 and `flatten` inlines fn (and
// what it calls) into it, so GCC's vectoriser, which runs after inlining,
// sees fn's loops under the AVX-512 target and uses 16-lane vectors there.
// Results may differ from the baseline build in the last bit (FMA
// contraction), never in meaning.
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
inline void vectorized(const F &fn) {
  if (avx512_available()) run_avx512(fn); else fn();
}
#else
template <class F>
inline void vectorized(const F &fn) {
  fn();
}
#endif

}  // namespace kiln::cpu
