// The inference kernels of packed_linear.hpp for AVX-512 and for AVX2 with
// FMA: packed_linear_kernels.inc twice, once per ISA. Each function carries
// its ISA's target attribute and runs only after the CPU said it has it, so
// libkiln still loads and runs on any x86-64.
#include "backend/cpu/packed_linear.hpp"

#include <algorithm>
#include <utility>

#include "backend/cpu/activation_math.hpp"
#include "backend/cpu/cpu_features.hpp"
#include "backend/cpu/sgemm_avx2.hpp"
#include "backend/cpu/sgemm_avx512.hpp"

#if defined(__x86_64__)
// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_ps, GCC bug
// 105593) when intrinsics are used under a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif

namespace kiln::cpu {

namespace {

using Job = PackedJob;

// Activations the kernels apply to whole vectors; the rest per element.
inline bool vector_activation(UnaryOp act) {
  return act == UnaryOp::Identity || act == UnaryOp::Relu || act == UnaryOp::LeakyRelu;
}

}  // namespace

#if defined(__x86_64__)

namespace avx512 {
#define KILN_ISA_TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma,avx2")))
using V = __m512;
constexpr int kLanes = 16;
// Tiles of up to 10 x 32: 20 FMAs per two loads of the weights and ten
// broadcasts. Per row, tiles of 8 to 12 rows ran within 2% of each other on
// a Zen 5 EPYC; 6 x 64 (four loads) was 3% slower.
constexpr int kTileRows = 10;
// 2 * NB * MR accumulators of the 32 registers.
constexpr int small_blocks(int rows) { return rows <= 3 ? 4 : rows <= 6 ? 2 : 1; }
KILN_ISA_TARGET inline V vzero() { return _mm512_setzero_ps(); }
KILN_ISA_TARGET inline V vset1(float x) { return _mm512_set1_ps(x); }
KILN_ISA_TARGET inline V vadd(V a, V b) { return _mm512_add_ps(a, b); }
KILN_ISA_TARGET inline V vload(const float *p) { return _mm512_loadu_ps(p); }
KILN_ISA_TARGET inline V vload_first(const float *p, int n) { return _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1), p); }
KILN_ISA_TARGET inline void vstore(float *p, V v) { _mm512_storeu_ps(p, v); }
KILN_ISA_TARGET inline void vstore_first(float *p, V v, int n) { _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1), v); }
KILN_ISA_TARGET inline V vfmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
// max(0, x) returns x when x is NaN, as x < 0 ? 0 : x does.
KILN_ISA_TARGET inline V vrelu(V x) { return _mm512_max_ps(_mm512_setzero_ps(), x); }
KILN_ISA_TARGET inline V vleaky(V x, float alpha) {
  const __mmask16 negative = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_mul_ps(x, negative, x, _mm512_set1_ps(alpha));
}
// dst[i * ldd + j] = src[j * lds + i] over 16 x 16.
KILN_ISA_TARGET inline void transpose16(const float *src, int64_t lds, float *dst, int64_t ldd) {
  sgemm_avx512_transpose_tile(src, lds, dst, ldd);
}
#include "backend/cpu/packed_linear_kernels.inc"
#undef KILN_ISA_TARGET
}  // namespace avx512

namespace avx2 {
#define KILN_ISA_TARGET __attribute__((target("avx2,fma")))
using V = __m256;
constexpr int kLanes = 8;
// Tiles of up to 6 x 16: 12 accumulators of the 16 registers.
constexpr int kTileRows = 6;
// 2 * NB * MR accumulators of the 16 registers.
constexpr int small_blocks(int rows) { return rows == 1 ? 3 : rows <= 3 ? 2 : 1; }
KILN_ISA_TARGET inline V vzero() { return _mm256_setzero_ps(); }
KILN_ISA_TARGET inline V vset1(float x) { return _mm256_set1_ps(x); }
KILN_ISA_TARGET inline V vadd(V a, V b) { return _mm256_add_ps(a, b); }
KILN_ISA_TARGET inline V vload(const float *p) { return _mm256_loadu_ps(p); }
KILN_ISA_TARGET inline V vload_first(const float *p, int n) { return _mm256_maskload_ps(p, avx2_first_lanes(n)); }
KILN_ISA_TARGET inline void vstore(float *p, V v) { _mm256_storeu_ps(p, v); }
KILN_ISA_TARGET inline void vstore_first(float *p, V v, int n) { _mm256_maskstore_ps(p, avx2_first_lanes(n), v); }
KILN_ISA_TARGET inline V vfmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
KILN_ISA_TARGET inline V vrelu(V x) { return _mm256_max_ps(_mm256_setzero_ps(), x); }
KILN_ISA_TARGET inline V vleaky(V x, float alpha) {
  const V negative = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  return _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(alpha)), negative);
}
// dst[i * ldd + j] = src[j * lds + i] over 16 x 16, as four 8 x 8 tiles.
KILN_ISA_TARGET inline void transpose16(const float *src, int64_t lds, float *dst, int64_t ldd) {
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 16; j += 8) sgemm_avx2_transpose8(src + j * lds + i, lds, dst + i * ldd + j, ldd);
}
#include "backend/cpu/packed_linear_kernels.inc"
#undef KILN_ISA_TARGET
}  // namespace avx2

const PackedKernels *avx512_packed_kernels() {
  // The tiles issue two FMAs per cycle on one core at ~2.5 GHz:
  // 80 multiply-adds per ns at best; 50 leaves room for clocks and loads.
  static const PackedKernels kernels{"avx512", avx512::kBlockCols, avx512::kTileRows, 50.0, avx512::pack,
                                     avx512::product};
  return avx512_available() && avx2_fma_available() ? &kernels : nullptr;
}

const PackedKernels *avx2_packed_kernels() {
  static const PackedKernels kernels{"avx2", avx2::kBlockCols, avx2::kTileRows, 25.0, avx2::pack, avx2::product};
  return avx2_fma_available() ? &kernels : nullptr;
}

#else  // not x86-64: the default path does every product

const PackedKernels *avx512_packed_kernels() { return nullptr; }
const PackedKernels *avx2_packed_kernels() { return nullptr; }

#endif

}  // namespace kiln::cpu
