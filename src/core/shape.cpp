// Shape validation and formatting.
#include "core/shape.hpp"

#include <string>

namespace kiln {

namespace {

void check_ndim(const int64_t *dims, int64_t n) {
  check(n >= 0 && n <= KILN_MAX_DIMS, KILN_ERROR_INVALID_ARGUMENT,
        "ndim must be in [0, " + std::to_string(KILN_MAX_DIMS) + "], got " + std::to_string(n));
  check(dims != nullptr || n == 0, KILN_ERROR_INVALID_ARGUMENT,
        "shape is NULL but ndim is " + std::to_string(n));
}

// The sizes as given, for messages about a shape that failed validation.
std::string raw_str(const int64_t *dims, int64_t n) {
  std::string s = "[";
  for (int64_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

Shape Shape::from(const int64_t *dims, int64_t n) {
  check_ndim(dims, n);
  Shape s;
  // The product of the non-zero sizes must fit, even when another size is 0:
  // then every partial product numel() forms fits too.
  int64_t product = 1;
  for (int64_t i = 0; i < n; ++i) {
    check(dims[i] >= 0, KILN_ERROR_INVALID_ARGUMENT,
          "shape " + raw_str(dims, n) + " has a negative size at dimension " + std::to_string(i));
    if (dims[i] != 0)
      check(!__builtin_mul_overflow(product, dims[i], &product), KILN_ERROR_INVALID_ARGUMENT,
            "shape " + raw_str(dims, n) + " has more elements than fit in int64");
    s.d[s.ndim++] = dims[i];
  }
  return s;
}

Shape Shape::pattern(const int64_t *dims, int64_t n) {
  check_ndim(dims, n);
  Shape s;
  for (int64_t i = 0; i < n; ++i) {
    check(dims[i] >= -1, KILN_ERROR_INVALID_ARGUMENT,
          "shape " + raw_str(dims, n) + " has size " + std::to_string(dims[i]) + " at dimension " +
              std::to_string(i) + " (sizes are >= 0, or -1 to infer one)");
    s.d[s.ndim++] = dims[i];
  }
  return s;
}

std::string Shape::str() const { return raw_str(d, ndim); }

}  // namespace kiln
