// Times the matrix products of one 784-1024-1024-10 SGD training step on the
// CPU backend (workload B of bench/run.py), product by product, in the
// step's order, so that each finds the cache as the step leaves it: where
// the step's time goes against the FMA peak, to tune the blocked kernel
// (sgemm_avx512.cpp). The weight-gradient products are the fused SGD
// updates (C = W, alpha = -lr, beta = 1), as the step program runs them.
// Built with the benchmarks, over libkiln's internal symbols:
//   ninja -C build bench/kiln_cpu_products_bench
//   build/bench/kiln_cpu_products_bench [threads] [steps] [batch] [peak GFLOP/s] [kernels]
// Medians over the steps; given a peak (bench/fma_peak's GFLOP/s for that
// thread count), each line also shows its fraction of it. kernels is a
// comma-separated list of auto, avx2 and blas (cpu::set_f32_products; auto
// alone by default): each step runs with the next of them in turn, and each
// gets its own table, so that two kernels are compared in alternating steps.
// This machine's speed drifts by 10% within minutes: compare two libkiln
// builds in alternating runs (LD_LIBRARY_PATH picks the library).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/kernels.hpp"

using namespace kiln;

namespace {

struct Product {
  const char *name;
  bool trans_a, trans_b;
  int64_t m, n, k;
  const float *a, *b;
  float *c;
  double alpha, beta;
};

// A buffer from the backend's own allocator, as a tensor gets (2 MiB
// aligned with huge pages from 2 MiB up), filled with small values that
// stay far from denormals through the repeated updates.
class Buffer {
 public:
  Buffer(Backend &backend, int64_t count)
      : backend_(backend), data_(static_cast<float *>(backend.alloc(-1, count * int64_t(sizeof(float))))) {
    for (int64_t i = 0; i < count; ++i) data_[i] = float((uint64_t(i) * 2654435761u) % 1000) * 1e-4f - 0.05f;
  }
  ~Buffer() { backend_.free(-1, data_); }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  float *get() const { return data_; }

 private:
  Backend &backend_;
  float *data_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
  const int64_t threads = argc > 1 ? std::atoll(argv[1]) : 1;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 30;
  const int64_t batch = argc > 3 ? std::atoll(argv[3]) : 256;
  auto backend = make_cpu_backend(threads);
  const int64_t used_threads = backend->info(-1).threads;
  const double peak = argc > 4 ? std::atof(argv[4]) : 0;
  struct Kernels {
    std::string name;
    cpu::F32Products which;
  };
  std::vector<Kernels> kernels;
  for (std::string list = argc > 5 ? argv[5] : "auto", name; !list.empty();) {
    const size_t comma = list.find(',');
    name = list.substr(0, comma);
    list = comma == std::string::npos ? "" : list.substr(comma + 1);
    if (name == "auto") kernels.push_back({name, cpu::F32Products::Auto});
    else if (name == "avx2") kernels.push_back({name, cpu::F32Products::Avx2});
    else if (name == "blas") kernels.push_back({name, cpu::F32Products::Blas});
    else return std::fprintf(stderr, "kernels: auto, avx2 or blas, not '%s'\n", name.c_str()), 2;
  }
  const int64_t in = 784, hidden = 1024, classes = 10;
  const double lr = 1e-6;  // small: the weights stay where they started
  Backend &be = *backend;
  Buffer x(be, batch * in), h1(be, batch * hidden), h2(be, batch * hidden);
  Buffer logits(be, batch * classes), dlogits(be, batch * classes);
  Buffer dh2(be, batch * hidden), dh1(be, batch * hidden);
  Buffer w1(be, hidden * in), w2(be, hidden * hidden), w3(be, classes * hidden);
  const std::vector<Product> products = {
      {"X W1^T", false, true, batch, hidden, in, x.get(), w1.get(), h1.get(), 1, 0},
      {"H1 W2^T", false, true, batch, hidden, hidden, h1.get(), w2.get(), h2.get(), 1, 0},
      {"H2 W3^T", false, true, batch, classes, hidden, h2.get(), w3.get(), logits.get(), 1, 0},
      {"W3 -= dL^T H2", true, false, classes, hidden, batch, dlogits.get(), h2.get(), w3.get(), -lr, 1},
      {"dL W3", false, false, batch, hidden, classes, dlogits.get(), w3.get(), dh2.get(), 1, 0},
      {"dH2 W2", false, false, batch, hidden, hidden, dh2.get(), w2.get(), dh1.get(), 1, 0},
      {"W2 -= dH2^T H1", true, false, hidden, hidden, batch, dh2.get(), h1.get(), w2.get(), -lr, 1},
      {"W1 -= dH1^T X", true, false, hidden, in, batch, dh1.get(), x.get(), w1.get(), -lr, 1},
  };
  const size_t runs = kernels.size();
  std::vector<std::vector<std::vector<double>>> us(runs, std::vector<std::vector<double>>(products.size()));
  std::vector<std::vector<double>> step_us(runs);
  for (int s = 0; s <= int(runs) * steps; ++s) {  // step 0 warms up
    const size_t run = size_t(s) % runs;
    cpu::set_f32_products(kernels[run].which);
    const auto step_start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < products.size(); ++i) {
      const Product &p = products[i];
      GemmArgs g;
      g.trans_a = p.trans_a, g.trans_b = p.trans_b, g.m = p.m, g.n = p.n, g.k = p.k;
      g.a = p.a, g.b = p.b, g.c = p.c, g.alpha = p.alpha, g.beta = p.beta;
      const auto start = std::chrono::steady_clock::now();
      backend->gemm(-1, g);
      if (s > 0)
        us[run][i].push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
    if (s > 0)
      step_us[run].push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - step_start).count());
  }
  for (size_t run = 0; run < runs; ++run) {
    std::printf("threads %lld, batch %lld, kernels %s, %d steps, medians%s\n", (long long)used_threads,
                (long long)batch, kernels[run].name.c_str(), steps, peak > 0 ? "; fraction of the given peak" : "");
    double flops = 0;
    for (size_t i = 0; i < products.size(); ++i) {
      const Product &p = products[i];
      const double f = 2.0 * double(p.m) * double(p.n) * double(p.k), t = median(us[run][i]);
      flops += f;
      std::printf("%-16s %5lld x %5lld x %5lld %9.1f us %7.1f GFLOP/s", p.name, (long long)p.m, (long long)p.n,
                  (long long)p.k, t, f / t / 1e3);
      if (peak > 0) std::printf(" %5.1f%%", 100 * f / t / 1e3 / peak);
      std::printf("\n");
    }
    const double t = median(step_us[run]);
    std::printf("%-34s %9.1f us %7.1f GFLOP/s", "all products", t, flops / t / 1e3);
    if (peak > 0) std::printf(" %5.1f%%", 100 * flops / t / 1e3 / peak);
    std::printf("\n");
  }
}
