// bf16 rounding, the one formula for the host (core/dtype.hpp's
// f32_to_bf16, used by the CPU backend and every conversion in core) and the
// CUDA kernels' stores (backend/cuda/device_math.cuh): round to nearest,
// ties to even, on the bits of the f32; a NaN stays a NaN (quiet, sign and
// top payload bits kept); infinities and overflow to them as IEEE rounding
// gives.
#pragma once

#include <cstdint>

#include "core/formulas/host_device.hpp"

namespace kiln::formulas {

KILN_HD uint16_t bf16_bits_from_f32_bits(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN: keep it one, quiet
  u += 0x7fffu + ((u >> 16) & 1u);                                        // half an ulp, ties to even
  return uint16_t(u >> 16);
}

KILN_HD uint32_t f32_bits_from_bf16_bits(uint16_t h) { return uint32_t(h) << 16; }

}  // namespace kiln::formulas
