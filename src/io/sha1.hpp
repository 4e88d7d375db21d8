// SHA-1 (FIPS 180-4), for the checksums ONNX's external data records: the
// hex digest of a data file, which kiln writes beside an exported model and
// checks when it imports one. A checksum against accidents (a data file of
// another export), not a defence against an attacker who writes both files.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::io {

class Sha1 {
 public:
  Sha1();
  void update(const void *data, size_t size);
  // The digest as 40 lowercase hex digits; the object is spent afterwards.
  std::string hex();

 private:
  void block(const unsigned char *p);

  uint32_t h_[5];
  unsigned char buffer_[64];
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes hashed
};

// The hex SHA-1 of the first `size` bytes of fd (opened from path), read in
// blocks; KILN_ERROR_IO naming path when a read fails or the file is shorter.
std::string sha1_of_file(int fd, const std::string &path, int64_t size);

}  // namespace kiln::io
