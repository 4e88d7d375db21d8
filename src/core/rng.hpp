// Counter-based random numbers: the value at position i of stream `seed` is a
// pure function of (seed, i), so CPU and CUDA kernels draw identical numbers
// in any order and on any number of threads. Usable from CUDA device code.
#pragma once

#include <cstdint>

#include "core/formulas/host_device.hpp"

namespace kiln {

// SplitMix64's finaliser over (seed, counter): passes BigCrush as a stream.
KILN_HD uint64_t rng_bits(uint64_t seed, uint64_t counter) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (counter + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform double in [0, 1) with 53 random bits.
KILN_HD double rng_uniform(uint64_t seed, uint64_t counter) {
  return double(rng_bits(seed, counter) >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace kiln
