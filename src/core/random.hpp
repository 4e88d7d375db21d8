// Random tensors from a context's generator. The numbers are drawn on the
// host from counters reserved from the context (core/rng.hpp) and copied to
// the device, so for one seed every device gets exactly the same values.
#pragma once

#include <memory>

#include "core/tensor.hpp"

namespace kiln {

// Uniform in [0, 1): each value is a multiple of 2^-p, p the dtype's
// significand bits, so rounding to the dtype can never produce 1.
// Float dtypes only (DTYPE_MISMATCH).
Tensor rand(const std::shared_ptr<Context> &ctx, const Shape &shape, DType dtype, Device device);
// Standard normal by Box-Muller over pairs of uniforms. Float dtypes only.
Tensor randn(const std::shared_ptr<Context> &ctx, const Shape &shape, DType dtype, Device device);

}  // namespace kiln
