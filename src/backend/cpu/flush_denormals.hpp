// The floating-point mode of the training kernels on the CPU.
#pragma once

namespace kiln::cpu {

// Denormal floats (softmax probabilities of confident predictions reach
// 1e-40) cost about a hundred cycles per operation on x86, turning a 1 us
// product into 10 us. Matrix products and the nn kernels (the training
// step) run with flush-to-zero and denormals-are-zero, as ML libraries do;
// elementwise tensor ops keep full IEEE behaviour. The caller's
// floating-point mode is restored when the kernel returns (the pool's
// workers copy it per job).
class FlushDenormals {
 public:
#if defined(__x86_64__)
  FlushDenormals() : saved_(__builtin_ia32_stmxcsr()) {
    constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;
    __builtin_ia32_ldmxcsr(saved_ | kFlushToZero | kDenormalsAreZero);
  }
  ~FlushDenormals() { __builtin_ia32_ldmxcsr(saved_); }

 private:
  unsigned saved_;
#else
  FlushDenormals() {}  // elsewhere the default floating-point mode stays
#endif
};

}  // namespace kiln::cpu
