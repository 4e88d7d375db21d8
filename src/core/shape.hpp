// Shape: up to KILN_MAX_DIMS sizes held inline, so shapes never allocate
// (a training step must not).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/error.hpp"

namespace kiln {

struct Shape {
  int ndim = 0;
  int64_t d[KILN_MAX_DIMS] = {};

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    for (int64_t v : dims) d[ndim++] = v;
  }
  // Validates a caller's (pointer, count): ndim in [0, 8], sizes >= 0, and a
  // product that fits in int64 (INVALID_ARGUMENT otherwise).
  static Shape from(const int64_t *dims, int64_t n);
  // As from, but a size may also be -1 (a reshape target, resolved by
  // Tensor::reshape); the product is not checked here.
  static Shape pattern(const int64_t *dims, int64_t n);

  int64_t operator[](int i) const { return d[i]; }
  int64_t &operator[](int i) { return d[i]; }
  int64_t numel() const {
    // An empty shape may have other sizes whose product overflows.
    for (int i = 0; i < ndim; ++i)
      if (d[i] == 0) return 0;
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= d[i];
    return n;
  }
  bool operator==(const Shape &o) const {
    if (ndim != o.ndim) return false;
    for (int i = 0; i < ndim; ++i)
      if (d[i] != o.d[i]) return false;
    return true;
  }
  bool operator!=(const Shape &o) const { return !(*this == o); }
  std::string str() const;  // "[2, 3]"
};

}  // namespace kiln
