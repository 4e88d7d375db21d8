// A double as kiln's messages and files write it: the shortest decimal that
// reads back as exactly the same double, in plain digits unless its exponent
// is far from 0 ("0.1", "1000000", "1e-300"). Not printf's "%f", which
// shows 1e-300 as 0.000000 and DBL_MAX in 309 digits, nor "%.17g"'s
// 0.10000000000000001. Model specs' descriptions (nn/spec.cpp) keep exactly
// this form: a checkpoint compares the description it records with the
// model's. Header-only, as excerpt.hpp.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace kiln {

inline std::string number_text(double v) {
  if (std::isnan(v)) return "nan";
  // Plain digits ("10", not "1e+01") unless the exponent is far from 0.
  const bool exponent_ok = std::fabs(v) < 1e-4 || std::fabs(v) >= 1e15;
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v && (exponent_ok || !std::strchr(buf, 'e'))) break;
  }
  return buf;
}

}  // namespace kiln
