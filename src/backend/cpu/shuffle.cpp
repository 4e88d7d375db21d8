// Backend::shuffle on the CPU: the permutation of [0, n) that stably sorts the
// 32-bit keys rng_bits(seed, i) >> 32. A sort by random keys, unlike a
// Fisher-Yates walk, is as easy to run in parallel on a GPU as here, so every
// backend draws the same order from the same seed (the CUDA backend sorts the
// same keys with CUB's stable radix sort).
#include <array>
#include <vector>

#include "backend/cpu/kernels.hpp"
#include "core/rng.hpp"

namespace kiln::cpu {

// Four stable counting passes of 8 bits, least significant first: O(n), and
// stability makes equal keys keep index order, as CUB does.
void shuffle(int64_t n, uint64_t seed, int64_t *out) {
  if (n <= 0) return;
  std::vector<uint32_t> keys(static_cast<size_t>(n)), keys_tmp(static_cast<size_t>(n));
  std::vector<int64_t> values_tmp(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    keys[size_t(i)] = uint32_t(rng_bits(seed, uint64_t(i)) >> 32);
    out[i] = i;
  }
  uint32_t *k_in = keys.data(), *k_out = keys_tmp.data();
  int64_t *v_in = out, *v_out = values_tmp.data();
  for (int shift = 0; shift < 32; shift += 8) {
    std::array<int64_t, 257> start{};
    for (int64_t i = 0; i < n; ++i) ++start[((k_in[i] >> shift) & 0xff) + 1];
    for (int b = 0; b < 256; ++b) start[size_t(b) + 1] += start[size_t(b)];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t to = start[(k_in[i] >> shift) & 0xff]++;
      k_out[to] = k_in[i];
      v_out[to] = v_in[i];
    }
    std::swap(k_in, k_out);
    std::swap(v_in, v_out);
  }
  // An even number of passes leaves the result where it started: in out.
}

}  // namespace kiln::cpu
