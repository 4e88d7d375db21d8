// Times the matrix products of one SGD training step on the CPU backend
// (workload B of bench/run.py, 784-1024-1024-10, by default), product by
// product, in the step's order, so that each finds the cache as the step
// leaves it: where
// the step's time goes against the FMA peak, to tune the blocked kernel
// (sgemm_avx512.cpp). The weight-gradient products are the fused SGD
// updates (C = W, alpha = -lr, beta = 1), as the step program runs them.
// Built with the benchmarks, over libkiln's internal symbols:
//   ninja -C build bench/kiln_cpu_products_bench
//   build/bench/kiln_cpu_products_bench [threads] [steps] [batch] [peak GFLOP/s] [kernels] [spec]
// Medians over the steps; given a peak (bench/fma_peak's GFLOP/s for that
// thread count), each line also shows its fraction of it. kernels is a
// comma-separated list of auto, avx2 and blas (cpu::set_f32_products; auto
// alone by default): each step runs with the next of them in turn, and each
// gets its own table, so that two kernels are compared in alternating steps.
// spec is the model (784-1024-1024-10 by default; 784-32-10 is workload A).
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
#include "products_common.hpp"

using namespace kiln;

namespace {

struct Product {
  std::string name;
  bool trans_a, trans_b;
  int64_t m, n, k;
  const float *a, *b;
  float *c;
  double alpha, beta;
};

// A buffer from the backend's own allocator, as a tensor gets (2 MiB
// aligned with huge pages from 2 MiB up), filled with bench::operand_value.
class Buffer {
 public:
  Buffer(Backend &backend, int64_t count)
      : backend_(backend), data_(static_cast<float *>(backend.alloc(-1, count * int64_t(sizeof(float))))) {
    for (int64_t i = 0; i < count; ++i) data_[i] = bench::operand_value(i);
  }
  ~Buffer() { backend_.free(-1, data_); }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  float *get() const { return data_; }

 private:
  Backend &backend_;
  float *data_;
};

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
  // The model, as bench/run.py spells it: B's by default.
  std::vector<int64_t> widths;
  for (std::string spec = argc > 6 ? argv[6] : "784-1024-1024-10"; !spec.empty();) {
    const size_t dash = spec.find('-');
    widths.push_back(std::atoll(spec.substr(0, dash).c_str()));
    spec = dash == std::string::npos ? "" : spec.substr(dash + 1);
  }
  if (widths.size() < 2 || *std::min_element(widths.begin(), widths.end()) < 1)
    return std::fprintf(stderr, "spec: widths such as 784-32-10\n"), 2;
  const size_t layers = widths.size() - 1;
  const double lr = 1e-6;  // small: the weights stay where they started
  Backend &be = *backend;
  // h[l]: layer l's input [batch, widths[l]] (h[0] = X, h[layers] the
  // logits), dh[l] its gradient, w[l] layer l's weight [widths[l + 1],
  // widths[l]].
  std::vector<std::unique_ptr<Buffer>> h, dh, w;
  for (size_t l = 0; l <= layers; ++l) {
    h.push_back(std::make_unique<Buffer>(be, batch * widths[l]));
    dh.push_back(std::make_unique<Buffer>(be, batch * widths[l]));
    if (l < layers) w.push_back(std::make_unique<Buffer>(be, widths[l + 1] * widths[l]));
  }
  auto value = [&](const char *prefix, size_t l) {
    return std::string(prefix) + (l == 0 ? "X" : l == layers ? "L" : "H" + std::to_string(l));
  };
  std::vector<Product> products;
  for (size_t l = 0; l < layers; ++l) {  // forward
    products.push_back({value("", l) + " W" + std::to_string(l + 1) + "^T", false, true, batch, widths[l + 1],
                        widths[l], h[l]->get(), w[l]->get(), h[l + 1]->get(), 1, 0});
  }
  for (size_t l = layers; l-- > 0;) {  // backward, the SGD update fused into the weight gradient's product
    products.push_back({"W" + std::to_string(l + 1) + " -= " + value("d", l + 1) + "^T " + value("", l), true, false,
                        widths[l + 1], widths[l], batch, dh[l + 1]->get(), h[l]->get(), w[l]->get(), -lr, 1});
    if (l == 0) break;
    products.push_back({value("d", l + 1) + " W" + std::to_string(l + 1), false, false, batch, widths[l], widths[l + 1],
                        dh[l + 1]->get(), w[l]->get(), dh[l]->get(), 1, 0});
  }
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
      const double f = 2.0 * double(p.m) * double(p.n) * double(p.k), t = bench::median(us[run][i]);
      flops += f;
      std::printf("%-16s %5lld x %5lld x %5lld %9.1f us %7.1f GFLOP/s", p.name.c_str(), (long long)p.m, (long long)p.n,
                  (long long)p.k, t, f / t / 1e3);
      if (peak > 0) std::printf(" %5.1f%%", 100 * f / t / 1e3 / peak);
      std::printf("\n");
    }
    const double t = bench::median(step_us[run]);
    std::printf("%-34s %9.1f us %7.1f GFLOP/s", "all products", t, flops / t / 1e3);
    if (peak > 0) std::printf(" %5.1f%%", 100 * flops / t / 1e3 / peak);
    std::printf("\n");
  }
}
