// An owned array on 64-byte cache lines, for packed matrix operands. The
// kernels load them 64 bytes at a time; a std::vector is only 16-byte
// aligned, and at 3 of its 4 possible offsets every one of those loads
// straddles two lines (the blocked sgemm's packing buffers were such
// vectors: about 1% of a 784-1024-1024-10 step).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.hpp"

namespace kiln::cpu {

template <class T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(const AlignedBuffer &) = delete;
  AlignedBuffer &operator=(const AlignedBuffer &) = delete;

  // Room for at least `count` elements: grows (what it held is lost) and
  // never shrinks, so a buffer reused per call allocates only while the
  // sizes it sees grow. Failure is OUT_OF_MEMORY naming `what` (what the
  // buffer is for) and leaves the buffer as it was.
  T *reserve(int64_t count, const char *what) {
    if (count <= capacity_) return data_;
    const size_t bytes = (size_t(count) * sizeof(T) + 63) / 64 * 64;
    T *grown = static_cast<T *>(std::aligned_alloc(64, bytes));
    if (!grown)
      fail(KILN_ERROR_OUT_OF_MEMORY, "out of host memory " + std::string(what) + " (" + std::to_string(bytes) +
                                         " bytes)");
    std::free(data_);
    data_ = grown;
    capacity_ = count;
    return data_;
  }
  T *data() const { return data_; }

 private:
  T *data_ = nullptr;
  int64_t capacity_ = 0;
};

}  // namespace kiln::cpu
