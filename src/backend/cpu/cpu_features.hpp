// Which vector extensions this CPU runs, asked once per process: kiln's
// CPU kernels are compiled per function for AVX2 or AVX-512 (target
// attributes, so libkiln loads on any x86-64) and run only where these say
// yes. Each answer is computed on its first call and cached; every call is
// thread-safe. On other architectures all are false.
#pragma once

namespace kiln::cpu {

// AVX2 and FMA (Haswell and later, AMD Zen and later).
bool avx2_fma_available();

// AVX-512 F, BW, VL and DQ (Skylake-X and later, AMD Zen 4 and later).
bool avx512_available();

// AVX-512 F and BF16 (Cooper Lake, Sapphire Rapids, AMD Zen 4 and later).
bool avx512_bf16_available();

// Which of vectorized()'s variants (vectorize.hpp) the element-wise
// kernels run, process-wide: Auto (the default) the widest the CPU has,
// Avx2 never AVX-512, Baseline the x86-64 baseline build's. So a test can
// compare them on one CPU, or a wrong result be bisected. Any thread; the
// kernels started after the call see it.
enum class LoopVectors { Auto, Avx2, Baseline };
void set_loop_vectors(LoopVectors which);
LoopVectors loop_vectors();

}  // namespace kiln::cpu
