// The inference products (Backend::pack_linear / linear_packed) against a
// float64 reference: on the CPU with each of its kernel sets this CPU runs
// (AVX-512, AVX2, and the default path), with 1 and 2 threads, over batch
// sizes on both sides of every tile height, widths on both sides of the
// column blocks, every activation, with and without bias; and the thread
// choice. On CUDA (the default path there) the same products once.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/packed_linear.hpp"
#include "backend_harness.hpp"
#include "core/rng.hpp"

namespace kiln {
namespace {

using test::g_case;

std::vector<float> randoms(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(2 * rng_uniform(seed, i) - 1);
  return v;
}

double activate(UnaryOp act, double alpha, double v) {
  switch (act) {
    case UnaryOp::Relu: return v < 0 ? 0 : v;
    case UnaryOp::LeakyRelu: return v < 0 ? alpha * v : v;
    case UnaryOp::Gelu: return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    case UnaryOp::Tanh: return std::tanh(v);
    case UnaryOp::Sigmoid: return 1 / (1 + std::exp(-v));
    default: return v;
  }
}

struct Shape3 {
  int64_t rows, out, in;
};

// y = act(x W^T + b) through the backend, against float64: each element
// within 2e-6 of the sum of |x_p w_p| and |b| (fp32 accumulation of k
// terms; activations have slope <= 1), which an error in any term exceeds.
void check_products(Backend &be, int64_t dev, Device device, const std::string &label) {
  const Shape3 shapes[] = {{1, 10, 32},  {2, 33, 7},   {3, 70, 5},   {4, 32, 784}, {5, 1, 1},   {6, 65, 40},
                           {7, 48, 13},  {8, 1024, 64}, {9, 10, 32},  {13, 33, 17}, {64, 32, 784}, {100, 97, 31},
                           {1, 1024, 300}, {200, 40, 3},
                           // split over threads by column blocks (fewer rows than a tile per
                           // thread), in one share of rows per thread, and in shares of about
                           // 192 rows
                           {16, 1024, 256}, {400, 64, 100}, {800, 64, 100},
                           // tiles of unequal height (29 rows as 10 + 10 + 9; 203 on two threads
                           // as 102 + 101 rows, tiles of 9 and 10), a part block and a half block
                           // masked, over many inputs
                           {29, 250, 600}, {11, 1000, 513}, {75, 234, 300}, {203, 266, 530},
                           {29, 10, 600}, {203, 45, 530}};
  const struct {
    UnaryOp act;
    double alpha;
  } acts[] = {{UnaryOp::Identity, 0}, {UnaryOp::Relu, 0}, {UnaryOp::LeakyRelu, 0.1},
              {UnaryOp::Gelu, 0},     {UnaryOp::Tanh, 0}, {UnaryOp::Sigmoid, 0}};
  uint64_t seed = 1;
  for (const Shape3 &s : shapes) {
    const std::vector<float> x = randoms(size_t(s.rows * s.in), seed++), w = randoms(size_t(s.out * s.in), seed++),
                             bias = randoms(size_t(s.out), seed++);
    auto upload = [&](const std::vector<float> &v) {
      void *p = be.alloc(dev, int64_t(v.size() * sizeof(float)));
      be.copy_to_device(dev, p, v.data(), int64_t(v.size() * sizeof(float)), false);
      return p;
    };
    void *dx = upload(x), *dw = upload(w), *db = upload(bias);
    void *dy = be.alloc(dev, s.rows * s.out * int64_t(sizeof(float)));
    std::unique_ptr<PackedLinear> packed = be.pack_linear(dev, DType::F32, dw, s.out, s.in);
    for (const auto &a : acts) {
      for (int with_bias = 0; with_bias < 2; ++with_bias) {
        g_case = label + " rows " + std::to_string(s.rows) + " out " + std::to_string(s.out) + " in " +
                 std::to_string(s.in) + " act " + std::to_string(int(a.act)) + (with_bias ? " bias" : "");
        PackedLinearArgs args;
        args.rows = s.rows, args.x = dx, args.w = packed.get(), args.bias = with_bias ? db : nullptr;
        args.y = dy, args.act = a.act, args.alpha = a.alpha;
        be.linear_packed(dev, args);
        std::vector<float> y(size_t(s.rows * s.out));
        be.copy_to_host(dev, y.data(), dy, int64_t(y.size() * sizeof(float)), false);
        bool ok = true;
        for (int64_t i = 0; i < s.rows && ok; ++i)
          for (int64_t j = 0; j < s.out && ok; ++j) {
            double sum = with_bias ? bias[size_t(j)] : 0.0, scale = with_bias ? std::fabs(bias[size_t(j)]) : 0.0;
            for (int64_t p = 0; p < s.in; ++p) {
              const double term = double(x[size_t(i * s.in + p)]) * double(w[size_t(j * s.in + p)]);
              sum += term, scale += std::fabs(term);
            }
            const double want = activate(a.act, a.alpha, sum), got = y[size_t(i * s.out + j)];
            if (!(std::fabs(got - want) <= 2e-6 * (scale + 1))) {
              std::fprintf(stderr, "  y[%lld, %lld] = %.9g, want %.9g\n", (long long)i, (long long)j, got, want);
              ok = false;
            }
          }
        CHECK(ok);
      }
    }
    for (void *p : {dx, dw, db, dy}) be.free(dev, p);
  }
}

// NaN in, NaN out through the fused ReLU (as x < 0 ? 0 : x), and rows
// beyond the batch never written.
void check_nan_and_bounds(Backend &be, const std::string &label) {
  g_case = label + " NaN and bounds";
  const int64_t rows = 3, out = 40, in = 5;
  std::vector<float> x = randoms(size_t(rows * in), 90), w = randoms(size_t(out * in), 91);
  x[0] = std::nanf("");
  std::vector<float> y(size_t((rows + 1) * out), 12345.0f);
  std::unique_ptr<PackedLinear> packed = be.pack_linear(-1, DType::F32, w.data(), out, in);
  PackedLinearArgs args;
  args.rows = rows, args.x = x.data(), args.w = packed.get(), args.y = y.data(), args.act = UnaryOp::Relu;
  be.linear_packed(-1, args);
  for (int64_t j = 0; j < out; ++j) CHECK(std::isnan(y[size_t(j)]));
  for (int64_t j = 0; j < out; ++j) CHECK(y[size_t(rows * out + j)] == 12345.0f);
}

// One thread below ~16 us of work, never more chunks than threads, and both
// threads for a memory-bound batch of one over big weights.
void check_thread_choice(const cpu::PackedKernels &k, const std::string &label) {
  g_case = label + " thread choice";
  ThreadPool one(1), two(2);
  CHECK(cpu::packed_chunks(one, k, 4096, 1024, 1024) == 1);
  CHECK(cpu::packed_chunks(two, k, 1, 10, 32) == 1);     // 784-32-10's last layer
  CHECK(cpu::packed_chunks(two, k, 1, 32, 784) == 1);    // its first, at batch 1
  CHECK(cpu::packed_chunks(two, k, 1, 1024, 1024) == 2);  // 4 MiB of weights from memory
  CHECK(cpu::packed_chunks(two, k, 4096, 1024, 784) == 2);
  CHECK(cpu::packed_chunks(two, k, 16, 1024, 256) == 2);  // the split cases of check_products
  CHECK(cpu::packed_chunks(two, k, 400, 64, 100) == 2);
  CHECK(cpu::packed_chunks(two, k, 800, 64, 100) == 2);
}

void cpu_cases(Context &) {
  const cpu::PackedKernels *sets[] = {cpu::avx512_packed_kernels(), cpu::avx2_packed_kernels()};
  const cpu::InferenceKernels choices[] = {cpu::InferenceKernels::Auto, cpu::InferenceKernels::Avx2};
  for (int64_t threads : {1, 2}) {
    ContextOptions options;
    options.threads = threads;
    options.log_level = KILN_LOG_ERROR;
    std::shared_ptr<Context> ctx = Context::create(options, backend_registry());
    Backend &be = ctx->cpu();
    for (int i = 0; i < 2; ++i) {
      if (!sets[i]) {
        std::printf("inference: no %s kernels on this CPU, skipped\n", i == 0 ? "AVX-512" : "AVX2");
        continue;
      }
      cpu::set_inference_kernels(choices[i]);
      const std::string label = std::string(sets[i]->name) + " x" + std::to_string(threads);
      check_products(be, -1, Device::cpu(), label);
      check_nan_and_bounds(be, label);
      if (threads == 2) check_thread_choice(*sets[i], label);
    }
    cpu::set_inference_kernels(cpu::InferenceKernels::Generic);
    check_products(be, -1, Device::cpu(), "default path x" + std::to_string(threads));
    cpu::set_inference_kernels(cpu::InferenceKernels::Auto);
  }
  // f64 weights keep the default path on every CPU.
  g_case = "f64 not packed";
  double w[6] = {1, 2, 3, 4, 5, 6};
  ThreadPool pool(1);
  CHECK(cpu::pack_linear(pool, DType::F64, w, 2, 3) == nullptr);
}

}  // namespace
}  // namespace kiln

int main() {
  using namespace kiln;
  return test::run_suite("inference", 2, cpu_cases,
                         [](Context &ctx) { check_products(ctx.backend(Device::cuda(0)), 0, Device::cuda(0), "cuda:0"); });
}
