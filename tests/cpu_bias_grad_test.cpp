// The CPU's bias gradients (backend/cpu/nn_kernels.cpp), called directly:
// act_backward_bias_grad, the one-pass activation backward and bias
// gradient that the CPU's step programs run, against act_backward then
// bias_grad (bit for bit), against float64 sums of the dx it wrote, and on
// pools of 1, 2 and 3 threads (the same bits: the rows are summed in blocks
// that do not depend on the thread count); bias_grad's bits across thread
// counts too; and the arguments it refuses. backend_test checks bias_grad
// against float64 through the Backend interface. Linked with kiln_internal.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/dtype_traits.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend_harness.hpp"
#include "core/rng.hpp"
#include "core/thread_pool.hpp"

using namespace kiln;
using test::g_case;
using test::status_of;

namespace {

// One layer's backward in dtype T: dy [rows, cols], its pre-activation and
// output, and the bias gradient's starting values.
template <class T>
struct Layer {
  using S = typename T::Storage;
  int64_t rows, cols;
  std::vector<S> dy, pre, y, db;

  Layer(int64_t r, int64_t c, uint64_t seed) : rows(r), cols(c) {
    const size_t n = size_t(r * c);
    for (size_t i = 0; i < n; ++i) {
      const double x = 4 * rng_uniform(seed, i) - 2;  // around every activation's kink
      pre.push_back(T::store(typename T::Compute(x)));
      y.push_back(T::store(typename T::Compute(x > 0 ? x : 0.1 * x)));
      dy.push_back(T::store(typename T::Compute(2 * rng_uniform(seed + 1, i) - 1)));
    }
    for (int64_t c0 = 0; c0 < c; ++c0) db.push_back(T::store(typename T::Compute(rng_uniform(seed + 2, size_t(c0)))));
  }

  ActBackwardArgs act(UnaryOp op, S *dx) const {
    return ActBackwardArgs{T::kType, rows * cols, op, 0.1, 1.5, dy.data(), pre.data(), y.data(), dx};
  }
  BiasGradArgs bias(const S *dx, S *out, double beta) const { return BiasGradArgs{T::kType, rows, cols, dx, out, beta}; }
};

template <class S>
bool same_bits(const std::vector<S> &a, const std::vector<S> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(S)) == 0;
}

// The activations with a backward; LeakyReLU and ELU take alpha = 0.1,
// Softplus beta = 0.1 with threshold 1.5.
const UnaryOp kActivations[] = {UnaryOp::Relu, UnaryOp::LeakyRelu, UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Gelu,
                                UnaryOp::Elu,  UnaryOp::Selu,      UnaryOp::Softplus, UnaryOp::Identity};

// For every activation: act_backward_bias_grad on pools of 1, 2 and 3
// threads against act_backward then bias_grad on each, and db against the
// float64 sum of the dx it wrote, with beta 0 (over a NaN) and 0.5.
template <class T>
void check_fused(int64_t rows, int64_t cols, ThreadPool *const (&pools)[3]) {
  using S = typename T::Storage;
  const Layer<T> layer(rows, cols, 100 + uint64_t(rows * 7 + cols));
  for (UnaryOp op : kActivations) {
    for (double beta : {0.0, 0.5}) {
      g_case = std::string("act_backward_bias_grad ") + dtype_name(T::kType) + " act " + std::to_string(int(op)) +
               " " + std::to_string(rows) + "x" + std::to_string(cols) + " beta " + std::to_string(beta);
      std::vector<S> start = layer.db;
      if (beta == 0) start[0] = T::store(typename T::Compute(std::numeric_limits<float>::quiet_NaN()));
      std::vector<S> first_dx, first_db;
      for (ThreadPool *pool : pools) {
        // Fused, into another buffer, and in place (dx over dy) as the step
        // programs run it.
        std::vector<S> other_dx(layer.dy.size()), other_db = start;
        cpu::act_backward_bias_grad(*pool, layer.act(op, other_dx.data()),
                                    layer.bias(other_dx.data(), other_db.data(), beta));
        Layer<T> in_place = layer;
        std::vector<S> fused_db = start;
        cpu::act_backward_bias_grad(*pool, in_place.act(op, in_place.dy.data()),
                                    in_place.bias(in_place.dy.data(), fused_db.data(), beta));
        CHECK(same_bits(in_place.dy, other_dx) && same_bits(fused_db, other_db));
        // Apart.
        std::vector<S> apart_dx(layer.dy.size()), apart_db = start;
        cpu::act_backward(*pool, layer.act(op, apart_dx.data()));
        cpu::bias_grad(*pool, layer.bias(apart_dx.data(), apart_db.data(), beta));
        CHECK(same_bits(in_place.dy, apart_dx));
        CHECK(same_bits(fused_db, apart_db));
        if (first_dx.empty()) {
          first_dx = in_place.dy, first_db = fused_db;
          // db = beta * db + the column sums of dx, in float64.
          for (int64_t c = 0; c < cols; ++c) {
            double want = beta == 0 ? 0 : beta * double(T::load(start[size_t(c)]));
            double magnitude = std::fabs(want);
            for (int64_t r = 0; r < rows; ++r) {
              const double v = double(T::load(in_place.dy[size_t(r * cols + c)]));
              want += v, magnitude += std::fabs(v);
            }
            const double got = double(T::load(fused_db[size_t(c)]));
            // The sum rounded once to T (f16 and bf16: 4e-3 covers both);
            // f64 sums round at every row.
            const double eps = T::kType == DType::F64 ? 1.2e-16 * double(rows + 1)
                               : T::kType == DType::F32 ? 6e-8
                                                        : 4e-3;
            test::expect(std::fabs(got - want) <= eps * magnitude + 1e-300,
                         "db[" + std::to_string(c) + "] = " + std::to_string(got) + ", want " + std::to_string(want));
          }
        } else {
          CHECK(same_bits(in_place.dy, first_dx));
          CHECK(same_bits(fused_db, first_db));
        }
      }
    }
  }
}

// Bad calls: INTERNAL, nothing written.
void check_refusals(ThreadPool &pool) {
  g_case = "act_backward_bias_grad refusals";
  const Layer<cpu::F32T> layer(40, 10, 5);
  std::vector<float> dx(layer.dy.size()), db = layer.db;
  const std::vector<float> db0 = db;
  const auto act = layer.act(UnaryOp::Relu, dx.data());
  std::string message;
  // The bias gradient over another buffer than the activation's dx.
  CHECK(status_of([&] { cpu::act_backward_bias_grad(pool, act, layer.bias(layer.dy.data(), db.data(), 0)); },
                  &message) == KILN_ERROR_INTERNAL);
  CHECK(message.find("not over the activation's dx") != std::string::npos);
  // Another shape, another dtype.
  BiasGradArgs shape = layer.bias(dx.data(), db.data(), 0);
  shape.rows = 39;
  CHECK(status_of([&] { cpu::act_backward_bias_grad(pool, act, shape); }) == KILN_ERROR_INTERNAL);
  BiasGradArgs dtype = layer.bias(dx.data(), db.data(), 0);
  dtype.t = DType::F64;
  CHECK(status_of([&] { cpu::act_backward_bias_grad(pool, act, dtype); }) == KILN_ERROR_INTERNAL);
  // GELU's gradient reads the pre-activation: without it, INTERNAL.
  ActBackwardArgs no_pre = layer.act(UnaryOp::Gelu, dx.data());
  no_pre.pre = nullptr;
  CHECK(status_of([&] { cpu::act_backward_bias_grad(pool, no_pre, layer.bias(dx.data(), db.data(), 0)); }) ==
        KILN_ERROR_INTERNAL);
  // Not an activation.
  CHECK(status_of([&] {
          cpu::act_backward_bias_grad(pool, layer.act(UnaryOp::Exp, dx.data()), layer.bias(dx.data(), db.data(), 0));
        }) == KILN_ERROR_INTERNAL);
  CHECK(db == db0);
  // No rows: db = beta * db.
  g_case = "act_backward_bias_grad, no rows";
  Layer<cpu::F32T> empty(0, 10, 6);
  empty.db = db0;
  cpu::act_backward_bias_grad(pool, empty.act(UnaryOp::Relu, dx.data()), empty.bias(dx.data(), db.data(), 0.5));
  bool halved = true;
  for (size_t c = 0; c < db.size(); ++c) halved = halved && db[c] == 0.5f * db0[c];
  CHECK(halved);
}

// bias_grad alone, where the blocks are many and long (more than 8192
// columns: fewer, longer blocks, kBiasPartialBytes) and the pools many.
void check_bias_grad_threads(ThreadPool *const (&pools)[3]) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3000, 10}, {700, 9000}}) {
    g_case = "bias_grad threads " + std::to_string(rows) + "x" + std::to_string(cols);
    const Layer<cpu::F32T> layer(rows, cols, 9);
    std::vector<float> first;
    for (ThreadPool *pool : pools) {
      std::vector<float> db = layer.db;
      cpu::bias_grad(*pool, layer.bias(layer.dy.data(), db.data(), 1.0));
      if (first.empty()) {
        first = db;
        bool close = true;
        for (int64_t c = 0; c < cols; ++c) {
          double want = layer.db[size_t(c)], magnitude = std::fabs(want);
          for (int64_t r = 0; r < rows; ++r) {
            want += layer.dy[size_t(r * cols + c)];
            magnitude += std::fabs(layer.dy[size_t(r * cols + c)]);
          }
          close = close && std::fabs(db[size_t(c)] - want) <= 6e-8 * magnitude;
        }
        CHECK(close);
      } else {
        CHECK(same_bits(db, first));
      }
    }
  }
}

}  // namespace

int main() {
  ThreadPool one(1), two(2), three(3);
  ThreadPool *const pools[3] = {&one, &two, &three};
  // One row; one block and a part; 8 blocks (a batch of 256); 8 and a part,
  // over 1, 10 and 300 columns.
  for (int64_t rows : {1, 33, 256, 300}) {
    for (int64_t cols : {1, 10, 300}) {
      check_fused<cpu::F32T>(rows, cols, pools);
      check_fused<cpu::F64T>(rows, cols, pools);
      check_fused<cpu::F16T>(rows, cols, pools);
      check_fused<cpu::BF16T>(rows, cols, pools);
    }
  }
  check_refusals(two);
  check_bias_grad_threads(pools);
  return test::finish("cpu bias gradients");
}
