// Element types, their sizes and names, and the f16/bf16 <-> f32 conversions
// of the host. Header-only, no CUDA; bf16 rounds by formulas/bf16.hpp, which
// the CUDA kernels use too (f16 there is CUDA's own, also ties to even).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "core/formulas/bf16.hpp"
#include "kiln/kiln.h"

namespace kiln {

enum class DType : int {
  F32 = KILN_F32, F16 = KILN_F16, BF16 = KILN_BF16, F64 = KILN_F64,
  I32 = KILN_I32, I64 = KILN_I64, U8 = KILN_U8,
};

inline bool dtype_valid(int d) { return d >= KILN_F32 && d <= KILN_U8; }

inline int64_t dtype_size(DType d) {
  switch (d) {
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::F64: case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

inline const char *dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F64: return "f64";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
  }
  return "?";
}

inline bool dtype_is_float(DType d) {
  return d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F64;
}

// IEEE half and bfloat16 stored as raw 16-bit patterns on the host.
inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = formulas::f32_bits_from_bf16_bits(h);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {  // formulas/bf16.hpp: the CUDA kernels' rounding too
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return formulas::bf16_bits_from_f32_bits(u);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) { mant <<= 1; --exp; }
      u = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_f16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (absu >= 0x477ff000u) return uint16_t(sign | 0x7c00u); // overflow -> inf
  if (absu < 0x38800000u) {                                 // subnormal or zero
    if (absu < 0x33000000u) return uint16_t(sign);
    uint32_t e = absu >> 23, m = (absu & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // half subnormals count units of 2^-24
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = absu - 0x38000000u;  // rebias 127 -> 15
  uint32_t out = r >> 13, rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (out & 1))) ++out;
  return uint16_t(sign | out);
}

}  // namespace kiln
