// Backend::shuffle: the permutation of [0, n) that stably sorts the 32-bit
// keys rng_bits(seed, i) >> 32, with CUB's radix sort.
//
// Why this is exactly the CPU's permutation (backend/cpu/shuffle.cpp): both
// backends compute the same keys (core/rng.hpp is shared) and both sort the
// pairs (key, i) with a *stable* sort: cub::DeviceRadixSort is stable, as is
// the CPU's LSD radix sort. A stable sort of the values 0..n-1 in index order
// has one possible result, the indices ordered by (key, index), so the two
// agree element for element whatever their algorithms, even on equal keys.
#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/device_math.cuh"
#include "core/rng.hpp"

namespace kiln::cuda {
namespace {

// The scratch block: keys in and out, then the values 0..n-1, then CUB's
// temporary storage, each 256-byte aligned.
constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

struct Scratch {
  uint32_t *keys_in, *keys_out;
  int64_t *values_in;
  void *temp;
};

size_t cub_temp_bytes(int64_t n) {
  size_t bytes = 0;
  KILN_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t *>(nullptr),
                                                static_cast<uint32_t *>(nullptr), static_cast<const int64_t *>(nullptr),
                                                static_cast<int64_t *>(nullptr), n),
                "sizing the shuffle's radix sort");
  return bytes;
}

Scratch split(void *block, int64_t n) {
  char *p = static_cast<char *>(block);
  const size_t key_bytes = aligned(size_t(n) * sizeof(uint32_t)), value_bytes = aligned(size_t(n) * sizeof(int64_t));
  return Scratch{reinterpret_cast<uint32_t *>(p), reinterpret_cast<uint32_t *>(p + key_bytes),
                 reinterpret_cast<int64_t *>(p + 2 * key_bytes), p + 2 * key_bytes + value_bytes};
}

// keys[i] = the high 32 bits of rng_bits(seed, i), values[i] = i.
__global__ void shuffle_keys_kernel(int64_t n, uint64_t seed, uint32_t *keys, int64_t *values) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    keys[i] = uint32_t(rng_bits(seed, uint64_t(i)) >> 32);
    values[i] = i;
  }
}

}  // namespace

size_t shuffle_scratch_bytes(int64_t n) {
  if (n <= 0) return 0;
  return 2 * aligned(size_t(n) * sizeof(uint32_t)) + aligned(size_t(n) * sizeof(int64_t)) + cub_temp_bytes(n);
}

void shuffle(const Launch &L, int64_t n, uint64_t seed, int64_t *out, void *scratch, size_t scratch_bytes) {
  if (n <= 0) return;
  size_t temp_bytes = cub_temp_bytes(n);
  check(scratch_bytes >= shuffle_scratch_bytes(n), KILN_ERROR_BACKEND, "shuffle: scratch memory too small");
  const Scratch s = split(scratch, n);
  shuffle_keys_kernel<<<blocks_for(L, n), kThreads, 0, L.stream>>>(n, seed, s.keys_in, s.values_in);
  KILN_CUDA_LAUNCHED("shuffle (keys)");
  KILN_CUDA_TRY(cub::DeviceRadixSort::SortPairs(s.temp, temp_bytes, s.keys_in, s.keys_out, s.values_in, out, n, 0,
                                                32, L.stream),
                "shuffling " + std::to_string(n) + " indices");
}

}  // namespace kiln::cuda
