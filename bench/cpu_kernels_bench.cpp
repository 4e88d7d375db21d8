// Times the CPU backend's kernels on the tutorial MLP's training step
// (784-32-10, batch 128, SGD with momentum), kernel by kernel and as a whole
// step, to tune thresholds and threading. Built with the benchmarks
// (bench/CMakeLists.txt: target kiln_cpu_kernels_bench, linked with
// kiln_internal since libkiln exports only the C API):
//   ninja -C build bench/kiln_cpu_kernels_bench && build/bench/kiln_cpu_kernels_bench [threads] [batch]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "core/rng.hpp"
#include "thread_time.hpp"

using namespace kiln;

namespace {

using bench::Timing;
using bench::thread_cpu_us;

// Wall time per call, and the calling thread's CPU time per call (what a
// single-threaded run costs when the machine is shared and busy).
Timing time_us(const std::function<void()> &fn, int reps) {
  fn();  // warm up
  const double cpu0 = thread_cpu_us();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  const double wall = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  return {wall / reps, (thread_cpu_us() - cpu0) / reps};
}

}  // namespace

int main(int argc, char **argv) {
  const int64_t threads = argc > 1 ? std::atoll(argv[1]) : 0;
  const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 128;
  const int64_t in = 784, hidden = 32, classes = 10, samples = 60000;
  auto backend = make_cpu_backend(threads);
  Backend &be = *backend;
  std::printf("threads %lld, batch %lld\n", (long long)be.info(-1).threads, (long long)batch);

  std::vector<uint8_t> images(size_t(samples * in));
  std::vector<int64_t> labels(static_cast<size_t>(samples)), rows(static_cast<size_t>(batch)), y(static_cast<size_t>(batch));
  for (size_t i = 0; i < images.size(); ++i) images[i] = uint8_t(rng_bits(1, i));
  for (int64_t i = 0; i < samples; ++i) labels[size_t(i)] = int64_t(rng_bits(2, uint64_t(i)) % uint64_t(classes));
  for (int64_t r = 0; r < batch; ++r) rows[size_t(r)] = int64_t(rng_bits(3, uint64_t(r)) % uint64_t(samples));

  // One flat parameter buffer (W1, b1, W2, b2) and its gradient, as the trainer keeps them.
  const int64_t n_params = hidden * in + hidden + classes * hidden + classes;
  std::vector<float> params(static_cast<size_t>(n_params)), grads(static_cast<size_t>(n_params)), velocity(static_cast<size_t>(n_params));
  for (int64_t i = 0; i < n_params; ++i) params[size_t(i)] = float(rng_uniform(4, uint64_t(i)) - 0.5) * 0.1f;
  float *w1 = params.data(), *b1 = w1 + hidden * in, *w2 = b1 + hidden, *b2 = w2 + classes * hidden;
  float *dw1 = grads.data(), *db1 = dw1 + hidden * in, *dw2 = db1 + hidden, *db2 = dw2 + classes * hidden;
  std::vector<float> x(size_t(batch * in)), h(size_t(batch * hidden)), logits(size_t(batch * classes)),
      dlogits(size_t(batch * classes)), dh(size_t(batch * hidden));
  double stats[3] = {0, 0, 0};
  const DType f32 = DType::F32;
  StepParams params_of_step;  // what the trainer's step table holds for one step
  params_of_step.lr = 0.01, params_of_step.step = 1;

  GatherArgs gather_x;
  gather_x.order = rows.data(), gather_x.count = batch;
  gather_x.x_type = DType::U8, gather_x.x = images.data(), gather_x.cols = in, gather_x.scale = 1.0 / 255;
  gather_x.out_x_type = f32, gather_x.out_x = x.data();
  GatherArgs gather_y;
  gather_y.order = rows.data(), gather_y.count = batch;
  gather_y.y_type = DType::I64, gather_y.y = labels.data(), gather_y.out_y = y.data();
  auto gemm = [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c) {
    GemmArgs g;
    g.t = f32, g.trans_a = ta, g.trans_b = tb, g.m = m, g.n = n, g.k = k, g.a = a, g.b = b, g.c = c;
    be.gemm(-1, g);
  };
  auto bias_act = [&](int64_t cols, float *y, const float *bias, UnaryOp act) {
    BiasActArgs a;
    a.t = f32, a.rows = batch, a.cols = cols, a.y = y, a.bias = bias, a.act = act;
    be.bias_act(-1, a);
  };
  auto bias_grad = [&](int64_t cols, const float *dy, float *db) {
    BiasGradArgs a;
    a.t = f32, a.rows = batch, a.cols = cols, a.dy = dy, a.db = db;
    be.bias_grad(-1, a);
  };
  LossArgs loss;
  loss.t = f32, loss.rows = batch, loss.cols = classes, loss.pred = logits.data(), loss.target = y.data();
  loss.grad_scale = 1.0 / double(batch), loss.dpred = dlogits.data(), loss.stats = stats;
  ActBackwardArgs relu_backward;
  relu_backward.t = f32, relu_backward.n = batch * hidden, relu_backward.act = UnaryOp::Relu;
  relu_backward.dy = dh.data(), relu_backward.y = h.data(), relu_backward.dx = dh.data();
  SgdArgs sgd;
  sgd.t = f32, sgd.n = n_params, sgd.params = params.data(), sgd.grads = grads.data();
  sgd.velocity = velocity.data(), sgd.momentum = 0.9;

  struct Kernel { const char *name; std::function<void()> fn; };
  std::vector<Kernel> kernels = {
      {"gather x u8->f32", [&] { be.gather(-1, gather_x, &params_of_step); }},
      {"gather labels", [&] { be.gather(-1, gather_y, &params_of_step); }},
      {"gemm X W1^T", [&] { gemm(false, true, batch, hidden, in, x.data(), w1, h.data()); }},
      {"bias_act relu", [&] { bias_act(hidden, h.data(), b1, UnaryOp::Relu); }},
      {"gemm H W2^T", [&] { gemm(false, true, batch, classes, hidden, h.data(), w2, logits.data()); }},
      {"bias_act identity", [&] { bias_act(classes, logits.data(), b2, UnaryOp::Identity); }},
      {"cross_entropy", [&] { be.cross_entropy(-1, loss); }},
      {"gemm dW2 = dL^T H", [&] { gemm(true, false, classes, hidden, batch, dlogits.data(), h.data(), dw2); }},
      {"bias_grad b2", [&] { bias_grad(classes, dlogits.data(), db2); }},
      {"gemm dH = dL W2", [&] { gemm(false, false, batch, hidden, classes, dlogits.data(), w2, dh.data()); }},
      {"act_backward relu", [&] { be.act_backward(-1, relu_backward); }},
      {"gemm dW1 = dH^T X", [&] { gemm(true, false, hidden, in, batch, dh.data(), x.data(), dw1); }},
      {"bias_grad b1", [&] { bias_grad(hidden, dh.data(), db1); }},
      {"sgd_update momentum", [&] { be.sgd_update(-1, sgd, &params_of_step); }},
  };
  Timing total{0, 0};
  std::printf("  %-22s %10s %10s\n", "kernel", "wall us", "cpu us");
  for (auto &k : kernels) {
    Timing t = time_us(k.fn, 2000);
    total.wall_us += t.wall_us;
    total.cpu_us += t.cpu_us;
    std::printf("  %-22s %10.2f %10.2f\n", k.name, t.wall_us, t.cpu_us);
  }
  std::printf("  %-22s %10.2f %10.2f\n", "sum of kernels", total.wall_us, total.cpu_us);
  Timing step = time_us([&] { for (auto &k : kernels) k.fn(); }, 2000);
  std::printf("step %.2f us wall (%.0f samples/s), %.2f us cpu of the calling thread (%.0f samples/s)\n",
              step.wall_us, double(batch) * 1e6 / step.wall_us, step.cpu_us, double(batch) * 1e6 / step.cpu_us);
  return 0;
}
