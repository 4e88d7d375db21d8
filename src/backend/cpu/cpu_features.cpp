// See cpu_features.hpp. __builtin_cpu_supports takes only string literals,
// so each extension is named here, in one place, rather than looked up.
#include "backend/cpu/cpu_features.hpp"

#include <atomic>

namespace kiln::cpu {

namespace {
std::atomic<LoopVectors> g_loop_vectors{LoopVectors::Auto};
}  // namespace

void set_loop_vectors(LoopVectors which) { g_loop_vectors.store(which, std::memory_order_relaxed); }
LoopVectors loop_vectors() { return g_loop_vectors.load(std::memory_order_relaxed); }

#if defined(__x86_64__)

namespace {
// __builtin_cpu_init is harmless if done already, and needed when a check
// runs before libgcc's constructor (a static initialiser of another library).
bool init() {
  __builtin_cpu_init();
  return true;
}
}  // namespace

bool avx2_fma_available() {
  static const bool available = init() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return available;
}

bool avx512_available() {
  static const bool available = init() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return available;
}

bool avx512_bf16_available() {
  static const bool available =
      init() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  return available;
}

#else

bool avx2_fma_available() { return false; }
bool avx512_available() { return false; }
bool avx512_bf16_available() { return false; }

#endif

}  // namespace kiln::cpu
