// Unsigned integers of 1 to 8 bytes from a byte buffer, whatever the host's
// byte order: the formats kiln reads fix theirs (zip and pickle little-endian,
// pickle's BINFLOAT big-endian).
#pragma once

#include <cstdint>

namespace kiln::io {

inline uint64_t load_le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline uint64_t load_be(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

}  // namespace kiln::io
