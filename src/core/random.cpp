// rand and randn: host generation from counter-based streams, copied to the
// device chunk by chunk.
#include "core/random.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/context.hpp"
#include "core/ops.hpp"
#include "core/rng.hpp"

namespace kiln {

namespace {

// Significand bits (with the implicit one) of a float dtype.
int significand_bits(DType dtype) {
  switch (dtype) {
    case DType::F64: return 53;
    case DType::F32: return 24;
    case DType::F16: return 11;
    case DType::BF16: return 8;
    default: return 0;
  }
}

// Stores value as element i of a host buffer of float dtype.
void store(DType dtype, void *buf, int64_t i, double value) {
  switch (dtype) {
    case DType::F64: static_cast<double *>(buf)[i] = value; break;
    case DType::F32: static_cast<float *>(buf)[i] = float(value); break;
    case DType::F16: static_cast<uint16_t *>(buf)[i] = f32_to_f16(float(value)); break;
    case DType::BF16: static_cast<uint16_t *>(buf)[i] = f32_to_bf16(float(value)); break;
    default: fail(KILN_ERROR_INTERNAL, "random store of non-float dtype");
  }
}

// Values are generated and copied in chunks, so the host buffer stays small
// however large the tensor.
constexpr int64_t kChunk = int64_t(1) << 16;

// A new tensor on device whose element i is value(i), for i in [0, numel).
// reserve(n) runs once, before any value, to claim the generator's counters.
template <class Reserve, class Value>
Tensor generate(const std::shared_ptr<Context> &ctx, const Shape &shape, DType dtype, Device device, const char *op,
                Reserve reserve, Value value) {
  check_float(dtype, op);
  // Allocating the tensor first validates shape and device before any draw
  // is reserved, so a failed call leaves the generator where it was.
  Tensor out = Tensor::empty(ctx, shape, dtype, device);
  const int64_t n = out.numel();
  if (n == 0) return out;
  reserve(n);
  const int64_t size = dtype_size(dtype);
  std::vector<unsigned char> host(size_t(std::min(n, kChunk) * size));
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t count = std::min(kChunk, n - begin);
    for (int64_t i = 0; i < count; ++i) store(dtype, host.data(), i, value(begin + i));
    out.backend().copy_to_device(device.index, out.data_as<unsigned char>() + begin * size, host.data(),
                                 count * size, false);
  }
  return out;
}

}  // namespace

Tensor rand(const std::shared_ptr<Context> &ctx, const Shape &shape, DType dtype, Device device) {
  uint64_t seed = 0, first = 0;
  const int p = significand_bits(dtype);
  const double scale = std::ldexp(1.0, -p);
  return generate(
      ctx, shape, dtype, device, "rand",
      [&](int64_t n) {
        first = ctx->reserve_random(uint64_t(n));
        seed = ctx->seed();
      },
      [&](int64_t i) { return double(rng_bits(seed, first + uint64_t(i)) >> (64 - p)) * scale; });
}

Tensor randn(const std::shared_ptr<Context> &ctx, const Shape &shape, DType dtype, Device device) {
  uint64_t seed = 0, first = 0;
  return generate(
      ctx, shape, dtype, device, "randn",
      [&](int64_t n) {
        // Element 2j and 2j + 1 share the pair of counters 2j, 2j + 1 (cos
        // and sin of one Box-Muller draw); an odd count still claims the
        // whole last pair.
        first = ctx->reserve_random(uint64_t(n + 1) / 2 * 2);
        seed = ctx->seed();
      },
      [&](int64_t i) {
        const uint64_t pair = first + uint64_t(i & ~int64_t(1));
        // 1 - u lies in (0, 1], so the log is finite.
        const double u1 = 1.0 - rng_uniform(seed, pair), u2 = rng_uniform(seed, pair + 1);
        const double r = std::sqrt(-2.0 * std::log(u1)), angle = 6.283185307179586 * u2;
        return r * ((i & 1) ? std::sin(angle) : std::cos(angle));
      });
}

}  // namespace kiln
