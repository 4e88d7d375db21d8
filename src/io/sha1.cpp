#include "io/sha1.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "io/regular_file.hpp"

namespace kiln::io {

namespace {

uint32_t rotl(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

}  // namespace

Sha1::Sha1() : h_{0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u} {}

void Sha1::block(const unsigned char *p) {
  uint32_t w[80];
  for (int t = 0; t < 16; ++t)
    w[t] = uint32_t(p[4 * t]) << 24 | uint32_t(p[4 * t + 1]) << 16 | uint32_t(p[4 * t + 2]) << 8 | uint32_t(p[4 * t + 3]);
  for (int t = 16; t < 80; ++t) w[t] = rotl(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4];
  for (int t = 0; t < 80; ++t) {
    uint32_t f, k;
    if (t < 20) f = (b & c) | (~b & d), k = 0x5A827999u;
    else if (t < 40) f = b ^ c ^ d, k = 0x6ED9EBA1u;
    else if (t < 60) f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDCu;
    else f = b ^ c ^ d, k = 0xCA62C1D6u;
    const uint32_t temp = rotl(a, 5) + f + e + k + w[t];
    e = d, d = c, c = rotl(b, 30), b = a, a = temp;
  }
  h_[0] += a, h_[1] += b, h_[2] += c, h_[3] += d, h_[4] += e;
}

void Sha1::update(const void *data, size_t size) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  length_ += size;
  if (buffered_) {
    const size_t take = std::min(size, sizeof buffer_ - buffered_);
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take, p += take, size -= take;
    if (buffered_ < sizeof buffer_) return;
    block(buffer_);
    buffered_ = 0;
  }
  for (; size >= 64; p += 64, size -= 64) block(p);
  std::memcpy(buffer_, p, size);
  buffered_ = size;
}

std::string Sha1::hex() {
  // The padding: 0x80, zeros to 56 bytes mod 64, the length in bits big-endian.
  const uint64_t bits = length_ * 8;
  const unsigned char one = 0x80, zero = 0;
  update(&one, 1);
  while (buffered_ != 56) update(&zero, 1);
  unsigned char tail[8];
  for (int i = 0; i < 8; ++i) tail[i] = (unsigned char)(bits >> (56 - 8 * i));
  update(tail, 8);
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (uint32_t h : h_)
    for (int shift = 28; shift >= 0; shift -= 4) out.push_back(digits[(h >> shift) & 15]);
  return out;
}

std::string sha1_of_file(int fd, const std::string &path, int64_t size) {
  Sha1 sha;
  std::vector<char> chunk(size_t(std::min<int64_t>(size, int64_t(1) << 20)));
  for (int64_t done = 0; done < size;) {
    const int64_t n = std::min<int64_t>(int64_t(chunk.size()), size - done);
    read_exactly(fd, path, chunk.data(), n, done);
    sha.update(chunk.data(), size_t(n));
    done += n;
  }
  return sha.hex();
}

}  // namespace kiln::io
