// Times two versions of sgemm_avx2.cpp's blocked kernel in one process, on
// the five large products of a 784-1024-1024-10 SGD step at batch 256 (the
// fused weight updates too: C = W, alpha = -lr, beta = 1), in alternating
// order round after round. This VM's speed moves by 10% between processes,
// more than a change to a kernel does; within one process, alternating
// calls see the same machine. Built and run by bench/sgemm_avx2_ab.sh, which
// compiles each version into its own namespace (kiln::cpu::v0, v1).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "products_common.hpp"

namespace kiln::cpu {
namespace v0 {
void sgemm_avx2_blocked(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t a_row, int64_t a_col,
                        const float *b, int64_t ldb, bool trans_b, float beta, float *c, int64_t ldc);
}
namespace v1 {
void sgemm_avx2_blocked(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t a_row, int64_t a_col,
                        const float *b, int64_t ldb, bool trans_b, float beta, float *c, int64_t ldc);
}
}  // namespace kiln::cpu

namespace {

struct Product {
  const char *name;
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
};

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// 2 MiB aligned, as the backend's tensors, filled with bench::operand_value.
float *filled(int64_t count) {
  const size_t bytes = (size_t(count) * sizeof(float) + (size_t(2) << 20) - 1) / (size_t(2) << 20) * (size_t(2) << 20);
  auto *p = static_cast<float *>(std::aligned_alloc(size_t(2) << 20, bytes));
  if (!p) std::abort();
  for (int64_t i = 0; i < count; ++i) p[i] = bench::operand_value(i);
  return p;
}

}  // namespace

int main(int argc, char **argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 40;
  if (rounds < 1) return std::fprintf(stderr, "usage: sgemm_avx2_ab [rounds]\n"), 2;
  const int64_t batch = 256;
  const Product products[] = {{"X W1^T", false, true, batch, 1024, 784, 1, 0},
                              {"H1 W2^T", false, true, batch, 1024, 1024, 1, 0},
                              {"W2 -= dH2^T H1", true, false, 1024, 1024, batch, -1e-3f, 1},
                              {"dH2 W2", false, false, batch, 1024, 1024, 1, 0},
                              {"W1 -= dH1^T X", true, false, 1024, 784, batch, -1e-3f, 1}};
  constexpr int kProducts = sizeof(products) / sizeof(products[0]);
  decltype(&kiln::cpu::v0::sgemm_avx2_blocked) versions[2] = {kiln::cpu::v0::sgemm_avx2_blocked,
                                                               kiln::cpu::v1::sgemm_avx2_blocked};
  std::vector<float *> a, b, c;
  for (const Product &p : products) {
    a.push_back(filled(p.m * p.k));
    b.push_back(filled(p.k * p.n));
    c.push_back(filled(p.m * p.n));
  }
  std::vector<double> each[2][kProducts], total[2];
  int v1_wins = 0;
  for (int r = 0; r < rounds; ++r) {
    double round_total[2] = {0, 0};
    for (int turn = 0; turn < 2; ++turn) {
      const int v = r % 2 ? 1 - turn : turn;  // who goes first alternates too
      for (int i = 0; i < kProducts; ++i) {
        const Product &p = products[i];
        const int64_t lda = p.trans_a ? p.m : p.k, ldb = p.trans_b ? p.k : p.n;
        const double t0 = seconds();
        versions[v](p.m, p.n, p.k, p.alpha, a[i], p.trans_a ? 1 : lda, p.trans_a ? lda : 1, b[i], ldb, p.trans_b,
                    p.beta, c[i], p.n);
        const double t = seconds() - t0;
        each[v][i].push_back(t);
        round_total[v] += t;
      }
      total[v].push_back(round_total[v]);
    }
    v1_wins += round_total[1] < round_total[0];
  }
  std::printf("medians of %d rounds, us and GFLOP/s: v0 (the given revision), v1 (the working tree)\n", rounds);
  for (int i = 0; i < kProducts; ++i) {
    const Product &p = products[i];
    const double flops = 2.0 * double(p.m * p.n * p.k);
    const double t0 = bench::median(each[0][i]), t1 = bench::median(each[1][i]);
    std::printf("%-16s %4lld x %4lld x %4lld  v0 %7.0f us %5.1f  v1 %7.0f us %5.1f\n", p.name, (long long)p.m,
                (long long)p.n, (long long)p.k, t0 * 1e6, flops / t0 / 1e9, t1 * 1e6, flops / t1 / 1e9);
  }
  const double t0 = bench::median(total[0]), t1 = bench::median(total[1]);
  std::printf("all five: v0 %.0f us, v1 %.0f us, v1 / v0 %.3f, v1 faster in %d of %d rounds\n", t0 * 1e6, t1 * 1e6,
              t1 / t0, v1_wins, rounds);
}
