// src/backend/cpu/cblas_api.hpp declares the OpenBLAS functions kiln calls
// instead of including <cblas.h>: this checks, at compile time, that every
// value and signature it declares is OpenBLAS's own (built only where that
// header is installed).
#include <cblas.h>

#include <type_traits>

#include "backend/cpu/cblas_api.hpp"

namespace own = kiln::cpu;

static_assert(std::is_same_v<own::blasint, ::blasint>, "blasint");
static_assert(int(own::CblasRowMajor) == int(::CblasRowMajor) && int(own::CblasColMajor) == int(::CblasColMajor),
              "CBLAS_ORDER");
static_assert(int(own::CblasNoTrans) == int(::CblasNoTrans) && int(own::CblasTrans) == int(::CblasTrans),
              "CBLAS_TRANSPOSE");
static_assert(sizeof(own::CBLAS_ORDER) == sizeof(::CBLAS_ORDER) &&
                  sizeof(own::CBLAS_TRANSPOSE) == sizeof(::CBLAS_TRANSPOSE),
              "enum sizes");

// The same function types once the enums are replaced by OpenBLAS's.
template <class Order, class Trans, class T>
using GemmOf = void (*)(Order, Trans, Trans, ::blasint, ::blasint, ::blasint, T, const T *, ::blasint, const T *,
                        ::blasint, T, T *, ::blasint);
static_assert(std::is_same_v<decltype(&::cblas_sgemm), GemmOf<::CBLAS_ORDER, ::CBLAS_TRANSPOSE, float>> &&
                  std::is_same_v<own::cblas_sgemm_fn, GemmOf<own::CBLAS_ORDER, own::CBLAS_TRANSPOSE, float>>,
              "cblas_sgemm");
static_assert(std::is_same_v<decltype(&::cblas_dgemm), GemmOf<::CBLAS_ORDER, ::CBLAS_TRANSPOSE, double>> &&
                  std::is_same_v<own::cblas_dgemm_fn, GemmOf<own::CBLAS_ORDER, own::CBLAS_TRANSPOSE, double>>,
              "cblas_dgemm");
static_assert(std::is_same_v<decltype(&::openblas_set_num_threads), own::openblas_set_num_threads_fn>,
              "openblas_set_num_threads");

int main() { return 0; }
