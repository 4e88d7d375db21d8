// How CPU kernels read and write each dtype, and the one switch per call that
// turns a runtime DType into a compile-time traits type, so that inner loops
// are specialised (and vectorised) per dtype instead of switching per element.
//
// Traits: Storage is the element type in memory, Compute the type arithmetic
// runs in (f16/bf16 compute in f32), load/store convert between the two.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace kiln::cpu {

template <class S>
struct PlainTraits {
  using Storage = S;
  using Compute = S;
  static constexpr bool kIdentity = true;  // load/store are no-ops
  static Compute load(Storage v) { return v; }
  static Storage store(Compute v) { return v; }
};

struct F32T : PlainTraits<float> { static constexpr DType kType = DType::F32; };
struct F64T : PlainTraits<double> { static constexpr DType kType = DType::F64; };
struct I32T : PlainTraits<int32_t> { static constexpr DType kType = DType::I32; };
struct I64T : PlainTraits<int64_t> { static constexpr DType kType = DType::I64; };
struct U8T : PlainTraits<uint8_t> { static constexpr DType kType = DType::U8; };

struct F16T {
  static constexpr DType kType = DType::F16;
  using Storage = uint16_t;
  using Compute = float;
  static constexpr bool kIdentity = false;
  static float load(uint16_t v) { return f16_to_f32(v); }
  static uint16_t store(float v) { return f32_to_f16(v); }
};

struct BF16T {
  static constexpr DType kType = DType::BF16;
  using Storage = uint16_t;
  using Compute = float;
  static constexpr bool kIdentity = false;
  static float load(uint16_t v) { return bf16_to_f32(v); }
  static uint16_t store(float v) { return f32_to_bf16(v); }
};

// Value conversion between compute types without undefined behaviour:
// float -> integer truncates toward zero and saturates (NaN gives 0);
// integer -> narrower integer wraps (two's complement); everything else is
// the ordinary conversion.
template <class To, class From>
inline To convert(From v) {
  if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    if (!(v == v)) return 0;
    // 2^digits is exactly representable and is one past the largest value.
    constexpr From kTooBig = From(std::numeric_limits<To>::max() / 2 + 1) * From(2);
    constexpr From kLowest = From(std::numeric_limits<To>::min());
    if (v <= kLowest) return std::numeric_limits<To>::min();
    if (v >= kTooBig) return std::numeric_limits<To>::max();
    return To(v);
  } else {
    return To(v);
  }
}

// Calls f(Traits{}) for t; throws for a dtype outside the set, which the
// caller should have refused already (a kiln bug, hence INTERNAL).
template <class F>
inline void dispatch_float(DType t, F &&f) {
  switch (t) {
    case DType::F32: f(F32T{}); return;
    case DType::F64: f(F64T{}); return;
    case DType::F16: f(F16T{}); return;
    case DType::BF16: f(BF16T{}); return;
    default: break;
  }
  fail(KILN_ERROR_INTERNAL, std::string("CPU kernel called with non-float dtype ") + dtype_name(t));
}

template <class F>
inline void dispatch_all(DType t, F &&f) {
  switch (t) {
    case DType::F32: f(F32T{}); return;
    case DType::F64: f(F64T{}); return;
    case DType::F16: f(F16T{}); return;
    case DType::BF16: f(BF16T{}); return;
    case DType::I32: f(I32T{}); return;
    case DType::I64: f(I64T{}); return;
    case DType::U8: f(U8T{}); return;
  }
  fail(KILN_ERROR_INTERNAL, "CPU kernel called with an unknown dtype " + std::to_string(int(t)));
}

template <class F>
inline void dispatch_integer(DType t, F &&f) {
  switch (t) {
    case DType::I32: f(I32T{}); return;
    case DType::I64: f(I64T{}); return;
    case DType::U8: f(U8T{}); return;
    default: break;
  }
  fail(KILN_ERROR_INTERNAL, std::string("CPU kernel called with non-integer dtype ") + dtype_name(t));
}

}  // namespace kiln::cpu
