// What the CPU matrix-product benchmarks (cpu_products_bench.cpp,
// sgemm_avx2_ab.cpp) share: the values their operands hold, and the median
// they report.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace bench {

// The operands' value i: small values that stay far from denormals through
// the repeated fused weight updates (C = W, alpha = -lr, beta = 1).
inline float operand_value(int64_t i) { return float((uint64_t(i) * 2654435761u) % 1000) * 1e-4f - 0.05f; }

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace bench
