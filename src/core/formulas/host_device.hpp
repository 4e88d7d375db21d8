// What the per-element formula headers beside this one need to compile for
// the host (the CPU backend, g++) and the device (the CUDA plugin, nvcc)
// alike: KILN_HD marks a function for both, and kiln::formulas::fm holds the
// math functions, taken from <cmath> on the host and from CUDA's device
// library in device code (__CUDA_ARCH__), so float stays float on both
// (an unqualified exp(float) on the host would be C's exp(double)).
// No CUDA header is included: core stays free of them.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define KILN_HD __host__ __device__ __forceinline__
#else
#define KILN_HD inline
#endif

namespace kiln::formulas::fm {

#if defined(__CUDA_ARCH__)
#define KILN_FORMULA_MATH(name) \
  template <class C> KILN_HD C name(C x) { return ::name(x); }
#else
#define KILN_FORMULA_MATH(name) \
  template <class C> KILN_HD C name(C x) { return std::name(x); }
#endif
KILN_FORMULA_MATH(exp)
KILN_FORMULA_MATH(expm1)
KILN_FORMULA_MATH(log)
KILN_FORMULA_MATH(log1p)
KILN_FORMULA_MATH(erf)
KILN_FORMULA_MATH(tanh)
KILN_FORMULA_MATH(sqrt)
KILN_FORMULA_MATH(fabs)
#undef KILN_FORMULA_MATH

#if defined(__CUDA_ARCH__)
template <class C> KILN_HD C pow(C x, C y) { return ::pow(x, y); }
#else
template <class C> KILN_HD C pow(C x, C y) { return std::pow(x, y); }
#endif

}  // namespace kiln::formulas::fm
