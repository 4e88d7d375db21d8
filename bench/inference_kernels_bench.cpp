// Times the CPU's inference products layer by layer on the benchmark models
// (784-32-10 and 784-1024-1024-10 at batch 1, 8, 64 and 4096): the packed,
// fused path (Backend::linear_packed) against the plain one it replaced
// (gemm on the unpacked weights, then bias_act), each as wall time and as
// the calling thread's CPU time per call, which stays meaningful on a busy
// machine for one thread; and the time to pack the layer's weights, which a
// prediction pays once per version of the parameters. Linked with kiln_internal (libkiln exports only
// the C API):
//   ninja -C build bench/kiln_inference_kernels_bench
//   build/bench/kiln_inference_kernels_bench [threads] [auto|avx2]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/packed_linear.hpp"
#include "core/rng.hpp"
#include "thread_time.hpp"

using namespace kiln;

namespace {

using bench::Timing;
using bench::thread_cpu_us;

// The best of 7 rounds of at least 50 ms each.
Timing best_of(const std::function<void()> &fn) {
  fn();
  int reps = 1;
  for (;;) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) fn();
    if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(50)) break;
    reps *= 2;
  }
  Timing best{1e30, 1e30};
  for (int round = 0; round < 7; ++round) {
    const double cpu0 = thread_cpu_us();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) fn();
    const double wall = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    best.wall_us = std::min(best.wall_us, wall / reps);
    best.cpu_us = std::min(best.cpu_us, (thread_cpu_us() - cpu0) / reps);
  }
  return best;
}

std::vector<float> randoms(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(rng_uniform(seed, i) - 0.5);
  return v;
}

}  // namespace

int main(int argc, char **argv) {
  const int64_t threads = argc > 1 ? std::atoll(argv[1]) : 1;
  if (argc > 2 && !std::strcmp(argv[2], "avx2")) cpu::set_inference_kernels(cpu::InferenceKernels::Avx2);
  auto backend = make_cpu_backend(threads);
  Backend &be = *backend;
  struct Layer {
    int64_t in, out;
  };
  const Layer layers[] = {{784, 32}, {32, 10}, {784, 1024}, {1024, 1024}, {1024, 10}};
  std::printf("threads %lld; GFLOP/s counts 2 per multiply-add of the layer's own size\n", (long long)threads);
  std::printf("%6s %5s %5s %12s %12s %12s %12s %9s %9s\n", "batch", "in", "out", "packed us", "packed cpu",
              "plain us", "plain cpu", "GFLOP/s", "pack us");
  for (int64_t batch : {1, 8, 64, 4096}) {
    for (const Layer &l : layers) {
      const std::vector<float> x = randoms(size_t(batch * l.in), 1), w = randoms(size_t(l.out * l.in), 2),
                               b = randoms(size_t(l.out), 3);
      std::vector<float> y(size_t(batch * l.out));
      const Timing pack = best_of([&] { be.pack_linear(-1, DType::F32, w.data(), l.out, l.in); });
      std::unique_ptr<PackedLinear> packed = be.pack_linear(-1, DType::F32, w.data(), l.out, l.in);
      PackedLinearArgs args;
      args.rows = batch, args.x = x.data(), args.w = packed.get(), args.bias = b.data(), args.y = y.data();
      args.act = UnaryOp::Relu;
      const Timing fused = best_of([&] { be.linear_packed(-1, args); });
      GemmArgs g;
      g.t = DType::F32, g.trans_b = true, g.m = batch, g.n = l.out, g.k = l.in;
      g.a = x.data(), g.b = w.data(), g.c = y.data();
      BiasActArgs ba;
      ba.t = DType::F32, ba.rows = batch, ba.cols = l.out, ba.y = y.data(), ba.bias = b.data(), ba.act = UnaryOp::Relu;
      const Timing plain = best_of([&] {
        be.gemm(-1, g);
        be.bias_act(-1, ba);
      });
      std::printf("%6lld %5lld %5lld %12.1f %12.1f %12.1f %12.1f %9.1f %9.1f\n", (long long)batch, (long long)l.in,
                  (long long)l.out, fused.wall_us, fused.cpu_us, plain.wall_us, plain.cpu_us,
                  2e-3 * double(batch * l.in * l.out) / fused.wall_us, pack.wall_us);
    }
  }
  return 0;
}
