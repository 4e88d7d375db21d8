// Step programs (core/program.hpp) on the CPU backend: run_op of every op
// type against the kernels it stands for, called directly (bit for bit: the
// default meaning of an op is exactly that sequence), a LinearOp and its
// backward also against float64 loops; compile_default over a step table
// (the per-step values read from StepParams) against the same steps done
// kernel by kernel; op names; KILN_ENABLE's and KILN_DISABLE's parsing and the
// default fast path without cuDNN (fast_path_with_env); the CPU's fusion of
// plain SGD into the weight-gradient products against the same steps kernel
// by kernel, and the programs it leaves alone;
// and on every backend present (CUDA too when usable; CUDA alone in
// program_test_cuda) a whole training program through the backend's own
// compile, with and without its fast path, against compile_default; and the
// step builder (train/step_builder.hpp), called directly: the ops of the
// programs it builds and the keys the program cache takes from its inputs.
// Linked with libkiln's internal symbols (kiln_private); the trainer-level
// checks through the C API are in test_fast_path.c.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/planning/narrow_step.hpp"
#include "backend_harness.hpp"
#include "thread_collective.hpp"
#include "core/context.hpp"
#include "core/error.hpp"
#include "core/program.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "train/step_builder.hpp"
#include "train/trainer.hpp"

using namespace kiln;

namespace {

using test::g_case;
using test::status_of;

std::vector<float> randoms(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(lo + (hi - lo) * rng_uniform(seed, i));
  return v;
}

template <class T>
bool same(const std::vector<T> &a, const std::vector<T> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

bool close(const std::vector<float> &got, const std::vector<double> &want, double rtol, double atol) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(double(got[i]) - want[i]) <= atol + rtol * std::fabs(want[i]))) {
      std::fprintf(stderr, "  [%zu] = %.9g, want %.9g\n", i, double(got[i]), want[i]);
      return false;
    }
  return true;
}

double gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

const int64_t kRows = 6, kIn = 7, kOut = 5;

// ---- one op at a time --------------------------------------------------------

void test_gather_cast_activation(Backend &be) {
  g_case = "gather";
  const int64_t n = 20, cols = 4;
  std::vector<uint8_t> x(size_t(n * cols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = uint8_t(i * 7);
  std::vector<int64_t> labels(static_cast<size_t>(n)), order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[size_t(i)] = i % 3, order[size_t(i)] = (i * 7) % n;
  GatherOp op;
  op.args.order = order.data(), op.args.count = kRows;
  op.args.x_type = DType::U8, op.args.x = x.data(), op.args.cols = cols, op.args.scale = 1.0 / 255;
  op.args.shift = -0.5, op.args.out_x_type = DType::F32;
  op.args.y_type = DType::I64, op.args.y = labels.data(), op.args.out_y_type = DType::I64;
  std::vector<float> ox(size_t(kRows * cols)), kx(ox.size());
  std::vector<int64_t> oy(static_cast<size_t>(kRows)), ky(oy.size());
  StepParams step;
  step.offset = 9;
  op.args.out_x = ox.data(), op.args.out_y = oy.data();
  run_op(be, -1, op, &step);
  GatherArgs direct = op.args;
  direct.out_x = kx.data(), direct.out_y = ky.data();
  be.gather(-1, direct, &step);
  CHECK(same(ox, kx) && same(oy, ky));
  // The op reads the offset: row r is sample order[9 + r].
  bool ok = true;
  for (int64_t r = 0; r < kRows; ++r) {
    const int64_t s = order[size_t(9 + r)];
    ok = ok && oy[size_t(r)] == labels[size_t(s)];
    ok = ok && std::fabs(ox[size_t(r * cols)] - (x[size_t(s * cols)] / 255.0 - 0.5)) <= 1e-7;
  }
  CHECK(ok);

  g_case = "cast";
  std::vector<float> in = randoms(50, 1);
  std::vector<uint16_t> out(50), want(50);
  CastOp cast;
  cast.args.from = DType::F32, cast.args.to = DType::BF16, cast.args.n = 50, cast.args.in = in.data();
  cast.args.out = out.data();
  run_op(be, -1, cast, &step);
  be.cast(-1, CastArgs{DType::F32, DType::BF16, 50, in.data(), want.data()});
  CHECK(same(out, want));

  g_case = "activation";
  std::vector<float> y(50), ky2(50);
  ActivationOp act;
  act.args.op = UnaryOp::LeakyRelu, act.args.t = DType::F32, act.args.n = 50, act.args.alpha = 0.2;
  act.args.in = in.data(), act.args.out = y.data();
  run_op(be, -1, act, &step);
  be.unary(-1, UnaryArgs{UnaryOp::LeakyRelu, DType::F32, 50, in.data(), ky2.data(), 0.2});
  CHECK(same(y, ky2));

  g_case = "activation backward";
  std::vector<float> dy = randoms(50, 2), kdy = dy;
  ActivationBackwardOp ab;
  ab.args.t = DType::F32, ab.args.n = 50, ab.args.act = UnaryOp::LeakyRelu, ab.args.alpha = 0.2;
  ab.args.dy = ab.args.dx = dy.data(), ab.args.pre = in.data(), ab.args.y = y.data();
  run_op(be, -1, ab, &step);
  be.act_backward(-1, ActBackwardArgs{DType::F32, 50, UnaryOp::LeakyRelu, 0.2, 0, kdy.data(), in.data(), y.data(),
                                      kdy.data()});
  CHECK(same(dy, kdy));
  std::vector<double> want_dy(50);
  const std::vector<float> dy0 = randoms(50, 2);
  for (size_t i = 0; i < 50; ++i) want_dy[i] = double(dy0[i]) * (in[i] > 0 ? 1 : 0.2);
  CHECK(close(dy, want_dy, 1e-6, 0));
}

void test_linear(Backend &be) {
  // Softplus with its two parameters, which LinearOp must hand on.
  const double beta = 1.5, threshold = 0.7;
  for (UnaryOp act : {UnaryOp::Identity, UnaryOp::Relu, UnaryOp::Gelu, UnaryOp::Tanh, UnaryOp::Softplus}) {
    for (bool bias : {false, true}) {
      g_case = "linear act " + std::to_string(int(act)) + (bias ? " bias" : "");
      std::vector<float> x = randoms(size_t(kRows * kIn), 10), w = randoms(size_t(kOut * kIn), 11);
      std::vector<float> b = randoms(size_t(kOut), 12);
      std::vector<float> y(size_t(kRows * kOut)), pre(y.size()), ky(y.size()), kpre(y.size());
      LinearOp op;
      op.t = DType::F32, op.rows = kRows, op.in = kIn, op.out = kOut;
      op.x = x.data(), op.w = w.data(), op.b = bias ? b.data() : nullptr, op.y = y.data(), op.pre = pre.data();
      op.act = act;
      op.alpha = beta, op.threshold = threshold;
      run_op(be, -1, op, nullptr);
      GemmArgs g;
      g.t = DType::F32, g.trans_b = true, g.m = kRows, g.n = kOut, g.k = kIn;
      g.a = x.data(), g.b = w.data(), g.c = ky.data();
      be.gemm(-1, g);
      if (bias || act != UnaryOp::Identity)
        be.bias_act(-1, BiasActArgs{DType::F32, kRows, kOut, ky.data(), bias ? b.data() : nullptr, act, beta,
                                    threshold, kpre.data()});
      CHECK(same(y, ky));
      if (bias || act != UnaryOp::Identity) CHECK(same(pre, kpre));
      // y = act(x W^T + b) in float64.
      std::vector<double> want(y.size());
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t o = 0; o < kOut; ++o) {
          double s = bias ? b[size_t(o)] : 0;
          for (int64_t i = 0; i < kIn; ++i) s += double(x[size_t(r * kIn + i)]) * w[size_t(o * kIn + i)];
          want[size_t(r * kOut + o)] = act == UnaryOp::Relu       ? (s > 0 ? s : 0)
                                       : act == UnaryOp::Gelu     ? gelu(s)
                                       : act == UnaryOp::Tanh     ? std::tanh(s)
                                       : act == UnaryOp::Softplus ? (beta * s > threshold ? s
                                                                     : std::log1p(std::exp(beta * s)) / beta)
                                                                  : s;
        }
      CHECK(close(y, want, 1e-5, 1e-6));

      g_case = "linear backward act " + std::to_string(int(act)) + (bias ? " bias" : "");
      std::vector<float> dy = randoms(y.size(), 13), kdy = dy, dy0 = dy;
      std::vector<float> dw(w.size()), db(b.size()), dx(x.size()), kdw(w.size()), kdb(b.size()), kdx(x.size());
      LinearBackwardOp bo;
      bo.t = DType::F32, bo.rows = kRows, bo.in = kIn, bo.out = kOut;
      bo.dy = dy.data(), bo.x = x.data(), bo.w = w.data(), bo.y = y.data(), bo.pre = pre.data(), bo.act = act;
      bo.alpha = beta, bo.threshold = threshold;
      bo.dw = dw.data(), bo.db = bias ? db.data() : nullptr, bo.dx = dx.data();
      run_op(be, -1, bo, nullptr);
      if (act != UnaryOp::Identity)
        be.act_backward(-1, ActBackwardArgs{DType::F32, kRows * kOut, act, beta, threshold, kdy.data(), pre.data(),
                                            y.data(), kdy.data()});
      GemmArgs gw;
      gw.t = DType::F32, gw.trans_a = true, gw.m = kOut, gw.n = kIn, gw.k = kRows;
      gw.a = kdy.data(), gw.b = x.data(), gw.c = kdw.data();
      be.gemm(-1, gw);
      if (bias) be.bias_grad(-1, BiasGradArgs{DType::F32, kRows, kOut, kdy.data(), kdb.data(), 0.0});
      GemmArgs gx;
      gx.t = DType::F32, gx.m = kRows, gx.n = kIn, gx.k = kOut;
      gx.a = kdy.data(), gx.b = w.data(), gx.c = kdx.data();
      be.gemm(-1, gx);
      CHECK(same(dy, kdy) && same(dw, kdw) && same(dx, kdx));
      if (bias) CHECK(same(db, kdb));
      // Against float64: dpre = dy * act'(pre), dW = dpre^T x, db = sums, dx = dpre W.
      std::vector<double> dpre(y.size()), want_dw(w.size(), 0), want_db(b.size(), 0), want_dx(x.size(), 0);
      for (size_t k = 0; k < y.size(); ++k) {
        const double p = want[k], z = pre[k];
        double d = 1;
        if (act == UnaryOp::Relu) d = p > 0 ? 1 : 0;
        if (act == UnaryOp::Tanh) d = 1 - p * p;
        if (act == UnaryOp::Gelu) d = (gelu(z + 1e-6) - gelu(z - 1e-6)) / 2e-6;
        if (act == UnaryOp::Softplus) d = beta * z > threshold ? 1 : 1 / (1 + std::exp(-beta * z));
        dpre[k] = dy0[k] * d;
      }
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t o = 0; o < kOut; ++o) {
          const double d = dpre[size_t(r * kOut + o)];
          want_db[size_t(o)] += d;
          for (int64_t i = 0; i < kIn; ++i) {
            want_dw[size_t(o * kIn + i)] += d * x[size_t(r * kIn + i)];
            want_dx[size_t(r * kIn + i)] += d * w[size_t(o * kIn + i)];
          }
        }
      CHECK(close(dw, want_dw, 1e-4, 1e-5));
      CHECK(close(dx, want_dx, 1e-4, 1e-5));
      if (bias) CHECK(close(db, want_db, 1e-4, 1e-5));
    }
  }
}

void test_dropout_loss_clip(Backend &be) {
  g_case = "dropout";
  const int64_t n = 1000;
  std::vector<float> x = randoms(size_t(n), 20), y(static_cast<size_t>(n)), ky(static_cast<size_t>(n));
  std::vector<uint8_t> mask(static_cast<size_t>(n)), kmask(static_cast<size_t>(n));
  StepParams step;
  step.dropout_seed = 0xabcdef;
  DropoutOp d;
  d.args.t = DType::F32, d.args.n = n, d.args.x = x.data(), d.args.y = y.data(), d.args.mask = mask.data();
  d.args.p = 0.4, d.args.stream = 3;
  run_op(be, -1, d, &step);
  DropoutArgs da = d.args;
  da.y = ky.data(), da.mask = kmask.data();
  be.dropout(-1, da, &step);
  CHECK(same(y, ky) && same(mask, kmask));
  bool rule = true;  // the step's seed: rng_bits(dropout_seed, stream)
  for (int64_t i = 0; i < n; ++i)
    rule = rule && mask[size_t(i)] == (rng_uniform(rng_bits(0xabcdef, 3), uint64_t(i)) < 0.6 ? 1 : 0);
  CHECK(rule);

  g_case = "dropout backward";
  std::vector<float> dx(static_cast<size_t>(n)), kdx(static_cast<size_t>(n));
  DropoutBackwardOp db;
  db.args.t = DType::F32, db.args.n = n, db.args.p = 0.4, db.args.dy = x.data(), db.args.mask = mask.data();
  db.args.dx = dx.data();
  run_op(be, -1, db, &step);
  be.dropout_backward(-1, DropoutBackwardArgs{DType::F32, n, x.data(), mask.data(), 0.4, kdx.data()});
  CHECK(same(dx, kdx));

  for (kiln_loss_kind kind : {KILN_LOSS_CROSS_ENTROPY, KILN_LOSS_MSE, KILN_LOSS_BCE_WITH_LOGITS}) {
    g_case = "loss " + std::to_string(int(kind));
    std::vector<float> pred = randoms(size_t(kRows * kOut), 21, -3, 3);
    std::vector<float> target = randoms(pred.size(), 22, 0, 1);
    std::vector<int64_t> labels(static_cast<size_t>(kRows));
    for (int64_t r = 0; r < kRows; ++r) labels[size_t(r)] = (r * 3) % kOut;
    std::vector<float> dpred(pred.size()), kd(pred.size());
    double stats[3] = {0, 0, 0}, kstats[3] = {0, 0, 0};
    LossOp op;
    op.kind = kind, op.args.t = DType::F32, op.args.rows = kRows, op.args.cols = kOut, op.args.grad_scale = 1.0 / kRows;
    op.args.pred = pred.data();
    op.args.target = kind == KILN_LOSS_CROSS_ENTROPY ? static_cast<const void *>(labels.data()) : target.data();
    op.args.dpred = dpred.data(), op.args.stats = stats;
    run_op(be, -1, op, nullptr);
    if (kind == KILN_LOSS_CROSS_ENTROPY)
      be.cross_entropy(-1, LossArgs{DType::F32, kRows, kOut, pred.data(), labels.data(), 1.0 / kRows, kd.data(),
                                    kstats});
    else if (kind == KILN_LOSS_MSE)
      be.mse(-1, LossArgs{DType::F32, kRows * kOut, 1, pred.data(), target.data(), 1.0 / kRows, kd.data(), kstats});
    else
      be.bce_with_logits(-1, LossArgs{DType::F32, kRows * kOut, 1, pred.data(), target.data(), 1.0 / kRows, kd.data(),
                                      kstats});
    CHECK(same(dpred, kd));
    CHECK(std::memcmp(stats, kstats, sizeof stats) == 0);
    CHECK(stats[0] > 0);
  }

  g_case = "clip";
  std::vector<float> g = randoms(100, 23, -1, 1), kg = g;
  double scratch = 0, kscratch = 0;
  ClipOp clip;
  clip.args.t = DType::F32, clip.args.n = 100, clip.args.grads = g.data(), clip.args.max_norm = 0.5;
  clip.args.scratch = &scratch;
  run_op(be, -1, clip, nullptr);
  be.clip_grad_norm(-1, ClipArgs{DType::F32, 100, kg.data(), 0.5, &kscratch});
  CHECK(same(g, kg) && scratch == kscratch);
  double norm = 0;
  for (float v : g) norm += double(v) * v;
  CHECK(std::fabs(std::sqrt(norm) - 0.5) < 1e-5);
}

void test_optimizer_ops(Backend &be) {
  const int64_t n = 64;
  StepParams step;
  step.lr = 0.03, step.step = 2;
  g_case = "sgd op";
  {
    std::vector<float> p = randoms(size_t(n), 30), g = randoms(size_t(n), 31), v = randoms(size_t(n), 32);
    std::vector<float> kp = p, kv = v, p0 = p, v0 = v;
    SgdOp op;
    op.args.t = DType::F32, op.args.n = n, op.args.params = p.data(), op.args.grads = g.data();
    op.args.velocity = v.data(), op.args.momentum = 0.9, op.args.weight_decay = 0.01, op.args.nesterov = true;
    run_op(be, -1, op, &step);
    SgdArgs a = op.args;
    a.params = kp.data(), a.velocity = kv.data();
    be.sgd_update(-1, a, &step);
    CHECK(same(p, kp) && same(v, kv));
    std::vector<double> want(static_cast<size_t>(n));  // step 2: the velocity continues
    for (size_t i = 0; i < size_t(n); ++i) {
      const double d = double(g[i]) + 0.01 * p0[i], vel = 0.9 * v0[i] + d;
      want[i] = p0[i] - 0.03 * (d + 0.9 * vel);
    }
    CHECK(close(p, want, 1e-6, 1e-7));
  }
  g_case = "adam op";
  {
    std::vector<float> p = randoms(size_t(n), 33), g = randoms(size_t(n), 34), m(size_t(n), 0.f), v(size_t(n), 0.f);
    std::vector<float> kp = p, km = m, kv = v;
    AdamOp op;
    op.args.t = DType::F32, op.args.n = n, op.args.params = p.data(), op.args.grads = g.data();
    op.args.m = m.data(), op.args.v = v.data(), op.args.weight_decay = 0.1, op.args.decoupled = true;
    StepParams first;
    first.lr = 0.01, first.step = 0;
    run_op(be, -1, op, &first);
    AdamArgs a = op.args;
    a.params = kp.data(), a.m = km.data(), a.v = kv.data();
    be.adam_update(-1, a, &first);
    CHECK(same(p, kp) && same(m, km) && same(v, kv));
  }
}

// ---- a whole program ----------------------------------------------------------

// A training step of Linear(kIn, kOut) + ReLU, cross-entropy and SGD, over
// A tensor over memory the test owns, for a program's `writes`.
Tensor over(Context &ctx, void *data, int64_t floats, Device device) {
  return Tensor::wrap(ctx.shared_from_this(), data, Shape{floats}, DType::F32, device, false, [] {});
}

// samples gathered at the step's offset, with lr per step: built as a
// program, and done kernel by kernel.
struct Fixture {
  static const int64_t kSamples = 40;
  std::vector<float> data = randoms(size_t(kSamples * kIn), 40, -2, 2);
  std::vector<int64_t> labels, order;
  std::vector<float> params = randoms(size_t(kOut * kIn + kOut), 41, -0.5, 0.5);
  std::vector<float> grads = std::vector<float>(params.size()), x = std::vector<float>(size_t(kRows * kIn));
  std::vector<float> y = std::vector<float>(size_t(kRows * kOut)), dy = std::vector<float>(size_t(kRows * kOut));
  std::vector<int64_t> batch_y = std::vector<int64_t>(static_cast<size_t>(kRows));
  double stats[3] = {0, 0, 0};
  Fixture() {
    for (int64_t i = 0; i < kSamples; ++i) labels.push_back(i % kOut), order.push_back((i * 11) % kSamples);
  }
  float *w() { return params.data(); }
  float *b() { return params.data() + kOut * kIn; }

  double weight_decay = 0;

  StepProgram program(Context &ctx, const std::vector<StepParams> &table) {
    StepProgram p;
    p.writes.push_back(over(ctx, params.data(), int64_t(params.size()), Device::cpu()));
    p.rows = kRows, p.trains = true, p.table = table.data(), p.table_size = int64_t(table.size());
    p.label = "test";
    GatherOp g;
    g.args.order = order.data(), g.args.count = kRows, g.args.x_type = DType::F32, g.args.x = data.data();
    g.args.cols = kIn, g.args.out_x_type = DType::F32, g.args.out_x = x.data();
    g.args.y_type = DType::I64, g.args.y = labels.data(), g.args.out_y = batch_y.data();
    p.ops.push_back(g);
    LinearOp lin;
    lin.t = DType::F32, lin.rows = kRows, lin.in = kIn, lin.out = kOut, lin.x = x.data(), lin.w = w(), lin.b = b();
    lin.y = y.data(), lin.act = UnaryOp::Relu;
    p.ops.push_back(lin);
    LossOp loss;
    loss.kind = KILN_LOSS_CROSS_ENTROPY, loss.args.t = DType::F32, loss.args.rows = kRows, loss.args.cols = kOut;
    loss.args.grad_scale = 1.0 / kRows, loss.args.pred = y.data(), loss.args.target = batch_y.data();
    loss.args.dpred = dy.data();
    loss.args.stats = stats;
    p.ops.push_back(loss);
    LinearBackwardOp back;
    back.t = DType::F32, back.rows = kRows, back.in = kIn, back.out = kOut, back.dy = dy.data(), back.x = x.data();
    back.w = w(), back.y = y.data(), back.act = UnaryOp::Relu, back.dw = grads.data();
    back.db = grads.data() + kOut * kIn;
    p.ops.push_back(back);
    SgdOp sgd;
    sgd.args.t = DType::F32, sgd.args.n = int64_t(params.size()), sgd.args.params = params.data();
    sgd.args.grads = grads.data();
    sgd.args.weight_decay = weight_decay;
    p.ops.push_back(sgd);
    return p;
  }

  void by_kernels(Backend &be, const StepParams &s) {
    GatherArgs g;
    g.order = order.data(), g.count = kRows, g.x_type = DType::F32, g.x = data.data(), g.cols = kIn;
    g.out_x_type = DType::F32, g.out_x = x.data(), g.y_type = DType::I64, g.y = labels.data();
    g.out_y = batch_y.data();
    be.gather(-1, g, &s);
    GemmArgs f;
    f.t = DType::F32, f.trans_b = true, f.m = kRows, f.n = kOut, f.k = kIn, f.a = x.data(), f.b = w(), f.c = y.data();
    be.gemm(-1, f);
    be.bias_act(-1, BiasActArgs{DType::F32, kRows, kOut, y.data(), b(), UnaryOp::Relu, 0, 0, nullptr});
    be.cross_entropy(-1, LossArgs{DType::F32, kRows, kOut, y.data(), batch_y.data(), 1.0 / kRows, dy.data(), stats});
    be.act_backward(-1, ActBackwardArgs{DType::F32, kRows * kOut, UnaryOp::Relu, 0, 0, dy.data(), nullptr, y.data(),
                                        dy.data()});
    GemmArgs dw;
    dw.t = DType::F32, dw.trans_a = true, dw.m = kOut, dw.n = kIn, dw.k = kRows, dw.a = dy.data(), dw.b = x.data();
    dw.c = grads.data();
    be.gemm(-1, dw);
    be.bias_grad(-1, BiasGradArgs{DType::F32, kRows, kOut, dy.data(), grads.data() + kOut * kIn, 0.0});
    SgdArgs a;
    a.t = DType::F32, a.n = int64_t(params.size()), a.params = params.data(), a.grads = grads.data();
    a.weight_decay = weight_decay;
    be.sgd_update(-1, a, &s);
  }
};

// Four steps for a Fixture's program: lr 0.5 / (i + 1), batch i at i * kRows.
std::vector<StepParams> fixture_table() {
  std::vector<StepParams> table(4);
  for (size_t i = 0; i < table.size(); ++i) {
    table[i].lr = 0.5 / double(i + 1);
    table[i].step = int64_t(i);
    table[i].offset = int64_t(i) * kRows;
  }
  return table;
}

void test_compile_default(Context &ctx) {
  Backend &be = ctx.cpu();
  const std::vector<StepParams> table = fixture_table();
  for (int via_backend = 0; via_backend < 2; ++via_backend) {
    g_case = via_backend ? "Backend::compile" : "compile_default";
    Fixture a, k;
    StepProgram p = a.program(ctx, table);
    p.fast_path = 0;  // the backend's plain sequence (test_fused_sgd: its fast path)
    std::unique_ptr<Executable> exe = via_backend ? be.compile(-1, p) : compile_default(be, -1, p);
    CHECK(exe->describe() == "kernels");
    exe->run(0, 3);
    for (int s = 0; s < 3; ++s) k.by_kernels(be, table[size_t(s)]);
    CHECK(same(a.params, k.params) && same(a.grads, k.grads));
    CHECK(std::memcmp(a.stats, k.stats, sizeof a.stats) == 0);
    CHECK(a.stats[0] > 0);
    // Runs continue from any first step: step 3 alone, with table[3].
    exe->run(3, 1);
    k.by_kernels(be, table[3]);
    CHECK(same(a.params, k.params));
    // The program copied the op list: clearing the caller's does nothing.
    p.ops.clear();
    exe->run(0, 1);
    k.by_kernels(be, table[0]);
    CHECK(same(a.params, k.params));
    // And the steps did train: the parameters moved from their start.
    CHECK(!same(a.params, Fixture().params));
  }
}

// The CPU's fast path folds plain SGD into the weight-gradient product
// (backend/cpu/program.hpp): W = (1 - lr wd) W - lr dy^T x in one product.
// Against the same steps kernel by kernel (gradient written, then the SGD
// update) it moves each step by f32 rounding only; a wrong sign, lr or beta
// is off by O(lr) = 0.1 (the order of dx and the update: test_fast_path.c).
// Bias gradients are still written; the weights' are not. Anything else that touches the
// gradients, or an update other than plain f32 SGD, keeps the plain sequence.
void test_fused_sgd(Context &ctx) {
  Backend &be = ctx.cpu();
  const std::vector<StepParams> table = fixture_table();
  for (double weight_decay : {0.0, 0.3}) {
    g_case = "fused SGD, weight decay " + std::to_string(weight_decay);
    Fixture a, k;
    a.weight_decay = k.weight_decay = weight_decay;
    StepProgram p = a.program(ctx, table);
    std::unique_ptr<Executable> exe = be.compile(-1, p);
    CHECK(exe->describe() == "kernels, SGD fused into 1 weight-gradient product");
    const uint64_t before = p.writes[0].version();
    exe->run(0, 4);
    CHECK(p.writes[0].version() > before);
    for (int s = 0; s < 4; ++s) k.by_kernels(be, table[size_t(s)]);
    CHECK(close(a.params, std::vector<double>(k.params.begin(), k.params.end()), 1e-6, 1e-6));
    CHECK(!same(a.params, Fixture().params));
    CHECK(a.stats[0] > 0 && std::fabs(a.stats[0] - k.stats[0]) <= 1e-6 * k.stats[0]);
    for (int64_t i = 0; i < kOut * kIn; ++i) CHECK(a.grads[size_t(i)] == 0.0f);  // never written
    for (int64_t i = kOut * kIn; i < kOut * kIn + kOut; ++i)
      CHECK(std::fabs(a.grads[size_t(i)] - k.grads[size_t(i)]) <= 1e-6);
  }
  // Not fusable: each keeps the plain sequence, bit for bit.
  struct Variant {
    const char *name;
    std::function<void(StepProgram &)> change;
  };
  const std::vector<Variant> variants = {
      {"fast path without epilogues", [](StepProgram &p) { p.fast_path = kFastAll & ~uint32_t(kFastEpilogues); }},
      {"momentum", [](StepProgram &p) { std::get<SgdOp>(p.ops.back()).args.momentum = 0.9; }},
      {"clipping", [](StepProgram &p) {
         ClipOp clip;
         clip.args.t = DType::F32, clip.args.n = std::get<SgdOp>(p.ops.back()).args.n;
         clip.args.grads = std::get<LinearBackwardOp>(p.ops[3]).dw, clip.args.max_norm = 1e9;
         p.ops.insert(p.ops.end() - 1, clip);
       }},
      {"an allreduce of the gradients", [](StepProgram &p) { p.ops.insert(p.ops.end() - 1, AllReduceWaitOp{}); }},
      {"mixed precision (a cast)", [](StepProgram &p) { p.ops.insert(p.ops.begin(), CastOp{}); }},
      {"a gradient past the end of the update", [](StepProgram &p) { std::get<SgdOp>(p.ops.back()).args.n -= 1; }},
      {"a bias outside the gradients", [](StepProgram &p) {
         SgdArgs &sgd = std::get<SgdOp>(p.ops.back()).args;
         sgd.n = std::get<LinearBackwardOp>(p.ops[3]).out * std::get<LinearBackwardOp>(p.ops[3]).in;
       }},
      {"weights read elsewhere than the parameters (a low-precision copy)", [](StepProgram &p) {
         std::get<LinearBackwardOp>(p.ops[3]).w = std::get<GatherOp>(p.ops[0]).args.x;
       }},
  };
  for (const Variant &v : variants) {
    g_case = std::string("fused SGD not taken: ") + v.name;
    Fixture a;
    StepProgram p = a.program(ctx, table);
    v.change(p);
    CHECK(be.compile(-1, p)->describe() == "kernels");
  }
  g_case = "fused SGD not taken: momentum, bit for bit";
  Fixture a, k;
  std::vector<float> va(a.params.size()), vk(k.params.size());
  StepProgram p = a.program(ctx, table);
  SgdArgs &sgd = std::get<SgdOp>(p.ops.back()).args;
  sgd.momentum = 0.9, sgd.velocity = va.data();
  StepProgram plain = k.program(ctx, table);
  SgdArgs &sgd_plain = std::get<SgdOp>(plain.ops.back()).args;
  sgd_plain.momentum = 0.9, sgd_plain.velocity = vk.data();
  be.compile(-1, p)->run(0, 4);
  compile_default(be, -1, plain)->run(0, 4);
  CHECK(same(a.params, k.params) && same(va, vk));
}

// ---- a compiled program on any backend ---------------------------------------

// A buffer in a backend's device memory, zeroed or filled from host values.
struct DevBuf {
  Backend &be;
  int64_t dev;
  int64_t bytes;
  void *ptr;
  DevBuf(Backend &b, int64_t d, int64_t n_bytes) : be(b), dev(d), bytes(n_bytes), ptr(b.alloc(d, n_bytes)) {
    std::vector<unsigned char> zeros(static_cast<size_t>(n_bytes), 0);
    b.copy_to_device(d, ptr, zeros.data(), n_bytes, false);
  }
  template <class T>
  DevBuf(Backend &b, int64_t d, const std::vector<T> &v) : DevBuf(b, d, int64_t(v.size() * sizeof(T))) {
    b.copy_to_device(d, ptr, v.data(), bytes, false);
  }
  DevBuf(const DevBuf &) = delete;
  DevBuf &operator=(const DevBuf &) = delete;
  ~DevBuf() { be.free(dev, ptr); }
  template <class T>
  T *as() const { return static_cast<T *>(ptr); }
  template <class T>
  std::vector<T> read() const {
    std::vector<T> v(size_t(bytes) / sizeof(T));
    be.copy_to_host(dev, v.data(), ptr, bytes, false);
    return v;
  }
};

// Linear(kIn, kHid) + GELU, Dropout(0.2), Linear(kHid, kOut), cross-entropy,
// the backward of all of it, gradient clipping and Adam, over batches
// gathered at the step's offset: every op kind a fused or captured
// compilation has to get right, in one program on one backend.
struct DeviceStep {
  static const int64_t kSamples = 48, kHid = 9, kR = 8, kSteps = 5;
  Backend &be;
  int64_t dev;
  std::vector<StepParams> host_table;
  DevBuf data, labels, order, params, grads, m, v, x, h, hpre, hd, mask, logits, by, dlogits, dh, dh2, stats,
      scratch, table;
  static int64_t np() { return kHid * kIn + kHid + kOut * kHid + kOut; }
  static std::vector<int64_t> make_labels() {
    std::vector<int64_t> l;
    for (int64_t i = 0; i < kSamples; ++i) l.push_back((i * 5) % kOut);
    return l;
  }
  static std::vector<int64_t> make_order() {
    std::vector<int64_t> o;
    for (int64_t i = 0; i < kSamples; ++i) o.push_back((i * 7) % kSamples);
    return o;
  }
  static std::vector<StepParams> make_table() {
    std::vector<StepParams> t(static_cast<size_t>(kSteps));
    for (int64_t i = 0; i < kSteps; ++i) {
      t[size_t(i)].lr = 0.02 / double(i + 1);
      t[size_t(i)].step = i;
      t[size_t(i)].dropout_seed = rng_bits(99, uint64_t(i));
      t[size_t(i)].offset = (i * kR) % (kSamples - kR);
    }
    return t;
  }
  DeviceStep(Backend &b, int64_t d)
      : be(b), dev(d), host_table(make_table()),
        data(b, d, randoms(size_t(kSamples * kIn), 50, -2, 2)), labels(b, d, make_labels()),
        order(b, d, make_order()), params(b, d, randoms(size_t(np()), 51, -0.5, 0.5)), grads(b, d, np() * 4),
        m(b, d, np() * 4), v(b, d, np() * 4), x(b, d, kR * kIn * 4), h(b, d, kR * kHid * 4),
        hpre(b, d, kR * kHid * 4), hd(b, d, kR * kHid * 4), mask(b, d, kR * kHid), logits(b, d, kR * kOut * 4),
        by(b, d, kR * 8), dlogits(b, d, kR * kOut * 4), dh(b, d, kR * kHid * 4), dh2(b, d, kR * kHid * 4),
        stats(b, d, 3 * 8), scratch(b, d, 8), table(b, d, host_table) {}
  float *w1() const { return params.as<float>(); }
  float *b1() const { return w1() + kHid * kIn; }
  float *w2() const { return b1() + kHid; }
  float *b2() const { return w2() + kOut * kHid; }
  float *gw1() const { return grads.as<float>(); }
  float *gb1() const { return gw1() + kHid * kIn; }
  float *gw2() const { return gb1() + kHid; }
  float *gb2() const { return gw2() + kOut * kHid; }

  StepProgram program(Context &ctx, uint32_t fast_path) const {
    StepProgram p;
    p.writes.push_back(over(ctx, params.ptr, np(), dev < 0 ? Device::cpu() : Device::cuda(dev)));
    p.rows = kR, p.trains = true, p.table = table.as<StepParams>(), p.table_size = kSteps;
    p.fast_path = fast_path, p.label = "program_test";
    GatherOp g;
    g.args.order = order.as<int64_t>(), g.args.count = kR, g.args.x_type = DType::F32, g.args.x = data.ptr;
    g.args.cols = kIn, g.args.out_x_type = DType::F32, g.args.out_x = x.ptr;
    g.args.y_type = DType::I64, g.args.y = labels.ptr, g.args.out_y = by.ptr;
    p.ops.push_back(g);
    LinearOp l1;
    l1.t = DType::F32, l1.rows = kR, l1.in = kIn, l1.out = kHid, l1.x = x.ptr, l1.w = w1(), l1.b = b1();
    l1.y = h.ptr, l1.pre = hpre.ptr, l1.act = UnaryOp::Gelu;
    p.ops.push_back(l1);
    DropoutOp d;
    d.args.t = DType::F32, d.args.n = kR * kHid, d.args.x = h.ptr, d.args.y = hd.ptr;
    d.args.mask = mask.as<uint8_t>(), d.args.p = 0.2, d.args.stream = 1;
    p.ops.push_back(d);
    LinearOp l2;
    l2.t = DType::F32, l2.rows = kR, l2.in = kHid, l2.out = kOut, l2.x = hd.ptr, l2.w = w2(), l2.b = b2();
    l2.y = logits.ptr;
    p.ops.push_back(l2);
    LossOp loss;
    loss.kind = KILN_LOSS_CROSS_ENTROPY, loss.args.t = DType::F32, loss.args.rows = kR, loss.args.cols = kOut;
    loss.args.grad_scale = 1.0 / kR, loss.args.pred = logits.ptr, loss.args.target = by.ptr;
    loss.args.dpred = dlogits.ptr;
    loss.args.stats = stats.as<double>();
    p.ops.push_back(loss);
    LinearBackwardOp b2op;
    b2op.t = DType::F32, b2op.rows = kR, b2op.in = kHid, b2op.out = kOut, b2op.dy = dlogits.ptr, b2op.x = hd.ptr;
    b2op.w = w2(), b2op.y = logits.ptr, b2op.dw = gw2(), b2op.db = gb2(), b2op.dx = dh.ptr;
    p.ops.push_back(b2op);
    DropoutBackwardOp db;
    db.args.t = DType::F32, db.args.n = kR * kHid, db.args.p = 0.2, db.args.dy = dh.ptr;
    db.args.mask = mask.as<uint8_t>(), db.args.dx = dh2.ptr;
    p.ops.push_back(db);
    LinearBackwardOp b1op;
    b1op.t = DType::F32, b1op.rows = kR, b1op.in = kIn, b1op.out = kHid, b1op.dy = dh2.ptr, b1op.x = x.ptr;
    b1op.w = w1(), b1op.y = h.ptr, b1op.pre = hpre.ptr, b1op.act = UnaryOp::Gelu, b1op.dw = gw1(), b1op.db = gb1();
    p.ops.push_back(b1op);
    ClipOp clip;
    clip.args.t = DType::F32, clip.args.n = np(), clip.args.grads = grads.ptr, clip.args.max_norm = 0.5;
    clip.args.scratch = scratch.as<double>();
    p.ops.push_back(clip);
    AdamOp adam;
    adam.args.t = DType::F32, adam.args.n = np(), adam.args.params = params.ptr, adam.args.grads = grads.ptr;
    adam.args.m = m.ptr, adam.args.v = v.ptr;
    p.ops.push_back(adam);
    return p;
  }
};

// A program's parameter update must write within its declared `writes`,
// and every run bumps their versions (what packed inference weights are
// keyed on), on both compilations.
void test_program_writes(Context &ctx) {
  Backend &be = ctx.cpu();
  std::vector<StepParams> table(2);
  table[0].lr = table[1].lr = 0.1;
  for (int via_backend = 0; via_backend < 2; ++via_backend) {
    g_case = via_backend ? "writes, Backend::compile" : "writes, compile_default";
    Fixture a;
    StepProgram p = a.program(ctx, table);
    const Tensor params = p.writes[0];
    std::unique_ptr<Executable> exe = via_backend ? be.compile(-1, p) : compile_default(be, -1, p);
    const uint64_t before = params.version();
    exe->run(0, 2);
    CHECK(params.version() > before);
    // Undeclared, or declared too short by one element: refused.
    for (int64_t missing : {int64_t(a.params.size()), int64_t(1)}) {
      StepProgram bad = a.program(ctx, table);
      bad.writes.clear();
      if (missing == 1) bad.writes.push_back(over(ctx, a.params.data(), int64_t(a.params.size()) - 1, Device::cpu()));
      std::string message;
      CHECK(status_of([&] { via_backend ? be.compile(-1, bad) : compile_default(be, -1, bad); }, &message) ==
            KILN_ERROR_INTERNAL);
      CHECK(message.find("not among its writes") != std::string::npos);
    }
  }
}

// On backend `be`: compile_default, and the backend's own compile with its
// whole fast path and with none, from the same start over the same steps.
// With no fast path a backend runs the plain kernel sequence: equal bit for
// bit to compile_default. With its fast path, CUDA may fuse and reorder f32
// operations (rounding ~1e-7 relative per step), which Adam's normalised
// steps amplify where a gradient is near zero: after 5 Adam steps of lr
// <= 0.02, 1.7e-5 on an H200 with cuDNN's Linear backward (2026-11-27), so
// 1e-4 bounds it, while a fused op computing the wrong thing is off by
// O(lr) = 1e-2 at the first step. The CPU's one part
// (plain SGD fused, test_fused_sgd) leaves Adam alone: equal bit for bit there.
void test_compiled_program(Context &ctx, Backend &be, int64_t dev, const char *name) {
  g_case = std::string("compiled program on ") + name;
  std::vector<float> by_default, no_fast, fast;
  std::vector<double> stats_default, stats_fast;
  for (int run = 0; run < 3; ++run) {
    DeviceStep s(be, dev);
    const StepProgram p = s.program(ctx, run == 2 ? uint32_t(kFastAll) : 0u);
    std::unique_ptr<Executable> exe = run == 0 ? compile_default(be, dev, p) : be.compile(dev, p);
    std::printf("%s, %s: %s\n", name, run == 0 ? "compile_default" : run == 1 ? "fast path none" : "fast path all",
                exe->describe().c_str());
    exe->run(0, 2);  // two runs: the second continues at step 2
    exe->run(2, DeviceStep::kSteps - 2);
    be.synchronize(dev);
    std::vector<float> params = s.params.read<float>();
    if (run == 0) by_default = params, stats_default = s.stats.read<double>();
    if (run == 1) no_fast = params;
    if (run == 2) fast = params, stats_fast = s.stats.read<double>();
    CHECK(!same(params, randoms(size_t(DeviceStep::np()), 51, -0.5, 0.5)));  // it trained
  }
  CHECK(same(no_fast, by_default));
  if (be.kind() == KILN_DEVICE_CPU) {
    CHECK(same(fast, by_default));
  } else {
    std::vector<double> want(by_default.begin(), by_default.end());
    CHECK(close(fast, want, 1e-4, 1e-4));
  }
  // The loss summed over the steps, and the correct count.
  CHECK(stats_default[0] > 0);
  CHECK(std::fabs(stats_fast[0] - stats_default[0]) <= 1e-5 * stats_default[0]);
  CHECK(stats_fast[1] == stats_default[1]);
}

// ---- the step builder ----------------------------------------------------------

// The ops' names in order.
std::vector<std::string> names_of(const StepProgram &p) {
  std::vector<std::string> names;
  for (const StepOp &op : p.ops) names.push_back(op_name(op));
  return names;
}

void test_step_builder(Context &c) {
  std::shared_ptr<Context> ctx = c.shared_from_this();
  ModelSpec spec;
  spec.parse("6-8-3");
  std::shared_ptr<Model> model = Model::create(ctx, spec, Device::cpu(), DType::F32);
  std::shared_ptr<Model> twin = Model::create(ctx, spec, Device::cpu(), DType::F32);
  const Optimizer optimizer(OptimizerConfig{}, model->flat());
  const Workspace ws = model->make_workspace(16, DType::F32);
  Tensor grads = Tensor::full(ctx, model->flat().shape(), DType::F32, Device::cpu(), 0.0);
  Tensor stats = Tensor::full(ctx, Shape{int64_t(sizeof(StepStats) / sizeof(double))}, DType::F64, Device::cpu(), 0.0);
  Tensor batch_x = Tensor::empty(ctx, Shape{16, 6}, DType::F32, Device::cpu());
  Tensor batch_y = Tensor::empty(ctx, Shape{16}, DType::I64, Device::cpu());
  Tensor rows = Tensor::empty(ctx, Shape{64}, DType::I64, Device::cpu());
  StepBuffers buffers;
  buffers.generation = 1;
  buffers.ws = &ws;
  buffers.batch_x = batch_x.data(), buffers.batch_y = batch_y.data();
  buffers.grads = grads.data();
  buffers.stats = stats.data();
  buffers.rows = rows.data_as<int64_t>();
  StepConfig config;
  config.label_smoothing = 0.1;
  config.precision = "fp32";
  Tensor data_x = Tensor::full(ctx, Shape{64, 6}, DType::U8, Device::cpu(), 3.0);
  Tensor data_y = Tensor::full(ctx, Shape{64}, DType::I64, Device::cpu(), 1.0);
  SourceView source;
  source.data = 7;
  source.x = data_x.data(), source.y = data_y.data();
  source.x_type = DType::U8, source.y_type = DType::I64;
  source.scale = 1.0 / 255, source.cols = 6;
  StepBuild b;
  b.model = model.get(), b.optimizer = &optimizer, b.config = &config, b.buffers = &buffers;
  b.trains = true, b.training = true, b.rows = 16, b.source = &source;

  g_case = "step builder: a training step over a dataset";
  StepProgram p = build_step_program(b);
  CHECK(p.rows == 16 && p.trains && p.fast_path == config.fast_path);
  CHECK(names_of(p) == std::vector<std::string>({"gather", "linear", "linear", "loss", "linear_backward",
                                                 "linear_backward", "sgd"}));
  const GatherOp *gather = std::get_if<GatherOp>(&p.ops[0]);
  CHECK(gather && gather->args.x == data_x.data() && gather->args.scale == 1.0 / 255 &&
        gather->args.order == buffers.rows && gather->args.out_x == batch_x.data() && gather->args.count == 16);
  const LossOp *loss = std::get_if<LossOp>(&p.ops[3]);
  CHECK(loss && loss->args.label_smoothing == 0.1 && loss->args.target == batch_y.data() &&
        loss->args.stats == stats_field(stats.data(), offsetof(StepStats, pass)) && loss->args.rows == 16);
  // The trainer's own step of a one-hidden-layer model is what CUDA's
  // narrow step kernels take (planning/narrow_step.hpp), buffers and all.
  const std::optional<cuda::NarrowStep> narrow = cuda::find_narrow_step(p.ops, kFastAll);
  CHECK(narrow && narrow->first == 1 && narrow->last == 5);
  CHECK(narrow && narrow->rows == 16 && narrow->in == 6 && narrow->hidden == 8 && narrow->classes == 3);
  CHECK(narrow && narrow->x == batch_x.data() && narrow->labels == batch_y.data() && narrow->smoothing == 0.1 &&
        narrow->act == UnaryOp::Relu && narrow->b1 && narrow->b2);
  CHECK(narrow && narrow->dw1 == grads.data() && narrow->stats == loss->args.stats);

  g_case = "step builder: evaluation of a caller's batch";
  b.trains = false, b.training = false, b.source = nullptr;
  p = build_step_program(b);
  CHECK(names_of(p) == std::vector<std::string>({"linear", "linear", "loss"}));
  loss = std::get_if<LossOp>(&p.ops.back());
  CHECK(loss && loss->args.dpred == nullptr && loss->args.stats == stats_field(stats.data(), offsetof(StepStats, step)));
  CHECK(!cuda::find_narrow_step(p.ops, kFastAll));  // no backward to fuse

  g_case = "step builder: clipping";
  config.grad_clip = 1.5;
  b.trains = b.training = true;
  p = build_step_program(b);
  CHECK(p.ops.size() >= 2 && names_of(p)[p.ops.size() - 2] == "clip");
  const ClipOp *clip = p.ops.size() >= 2 ? std::get_if<ClipOp>(&p.ops[p.ops.size() - 2]) : nullptr;
  CHECK(clip && clip->args.max_norm == 1.5 &&
        clip->args.scratch == stats_field(stats.data(), offsetof(StepStats, clip_scratch)));

  // Data parallel: N > 1 ranks average the gradients (an allreduce, then the
  // wait, before clipping and the update, and no CUDA graphs); one rank has
  // nothing to average, and its step is the step without a communicator.
  for (int64_t ranks : {1, 2}) {
    g_case = "step builder: a communicator of " + std::to_string(ranks) + " rank(s)";
    config.grad_clip = 0;
    ThreadCollective comm(std::make_shared<Hub>(ranks), 0);  // only built, not run
    b.comm = &comm;
    p = build_step_program(b);
    b.comm = nullptr;
    const StepProgram alone = build_step_program(b);
    if (ranks == 1) {
      CHECK(names_of(p) == names_of(alone) && p.fast_path == config.fast_path && p.label == alone.label);
    } else {
      std::vector<std::string> want = names_of(alone);
      want.insert(want.end() - 1, {"allreduce_start", "allreduce_wait"});
      CHECK(names_of(p) == want && p.fast_path == (config.fast_path & ~uint32_t(kFastGraphs)));
    }
  }

  // Everything a program depends on that can change is in its key: the same
  // inputs give equal keys, and each change another.
  g_case = "step builder: keys";
  b.source = &source;
  const StepKey key = step_key(b);
  CHECK(step_key(b) == key);
  SourceView other = source;
  const auto differs = [&](const char *what, const std::function<void()> &change, const std::function<void()> &undo) {
    g_case = std::string("step builder: the key changes with ") + what;
    change();
    CHECK(!(step_key(b) == key));
    undo();
    CHECK(step_key(b) == key);
  };
  differs("the normalisation's scale", [&] { source.scale = 2; }, [&] { source.scale = 1.0 / 255; });
  differs("the normalisation's shift", [&] { source.shift = -0.5; }, [&] { source.shift = 0; });
  differs("the data's identity (memory reused)", [&] { source.data = 8; }, [&] { source.data = 7; });
  differs("the labels", [&] { source.y = grads.data(); }, [&] { source.y = data_y.data(); });
  differs("the features' dtype", [&] { source.x_type = DType::F32; }, [&] { source.x_type = DType::U8; });
  differs("no source", [&] { b.source = nullptr; }, [&] { b.source = &source; });
  differs("another source", [&] { other.x = grads.data(), b.source = &other; }, [&] { b.source = &source; });
  differs("the rows", [&] { b.rows = 8; }, [&] { b.rows = 16; });
  differs("the training mode", [&] { b.training = false; }, [&] { b.training = true; });
  differs("training or evaluating", [&] { b.trains = false; }, [&] { b.trains = true; });
  differs("the buffers' generation", [&] { buffers.generation = 2; }, [&] { buffers.generation = 1; });
  differs("the parameters' memory", [&] { b.model = twin.get(); }, [&] { b.model = model.get(); });
}

void test_op_names() {
  g_case = "op names";
  CHECK(std::string(op_name(GatherOp{})) == "gather");
  CHECK(std::string(op_name(CastOp{})) == "cast");
  CHECK(std::string(op_name(LinearOp{})) == "linear");
  CHECK(std::string(op_name(ActivationOp{})) == "activation");
  CHECK(std::string(op_name(DropoutOp{})) == "dropout");
  CHECK(std::string(op_name(LossOp{})) == "loss");
  CHECK(std::string(op_name(LinearBackwardOp{})) == "linear_backward");
  CHECK(std::string(op_name(ActivationBackwardOp{})) == "activation_backward");
  CHECK(std::string(op_name(DropoutBackwardOp{})) == "dropout_backward");
  CHECK(std::string(op_name(ClipOp{})) == "clip");
  CHECK(std::string(op_name(SgdOp{})) == "sgd");
  CHECK(std::string(op_name(AdamOp{})) == "adam");
}

void test_fast_path_with_env() {
  unsetenv("KILN_ENABLE");
  unsetenv("KILN_DISABLE");
  g_case = "cuDNN is off by default";
  CHECK(TrainerOptions{}.fast_path == kFastDefault);
  CHECK((kFastDefault & kFastCudnn) == 0);
  CHECK((kFastDefault & kFastNarrow) == 0);
  CHECK(kFastDefault == (kFastEpilogues | kFastGraphs));
  struct Case { const char *enable, *disable; uint32_t asked, want; };
  const Case cases[] = {
      {nullptr, nullptr, kFastDefault, kFastDefault},
      {nullptr, nullptr, kFastAll, kFastAll},
      {"", "", kFastDefault, kFastDefault},
      {nullptr, "graphs", kFastAll, kFastAll & ~uint32_t(kFastGraphs)},
      {nullptr, "graphs,cudnn", kFastAll, kFastAll & ~uint32_t(kFastGraphs | kFastCudnn)},
      {nullptr, "epilogues,cudnn", kFastAll, kFastAll & ~uint32_t(kFastEpilogues | kFastCudnn)},
      {nullptr, "all", kFastAll, 0},
      {nullptr, "cudnn,,graphs", kFastAll, kFastAll & ~uint32_t(kFastGraphs | kFastCudnn)},
      {"cudnn", nullptr, kFastDefault, kFastDefault | kFastCudnn},
      {"cudnn,narrow", nullptr, kFastDefault, kFastAll},
      {"cudnn", nullptr, 0, kFastCudnn},
      {"narrow", nullptr, 0, kFastNarrow},
      {nullptr, "narrow", kFastAll, kFastAll & ~uint32_t(kFastNarrow)},
      {"all", nullptr, 0, kFastAll},
      {"cudnn", "cudnn", kFastDefault, kFastDefault},  // disabling wins
      {"all", "graphs", 0, kFastAll & ~uint32_t(kFastGraphs)},
  };
  for (const Case &c : cases) {
    g_case = std::string("KILN_ENABLE=") + (c.enable ? c.enable : "(unset)") + " KILN_DISABLE=" +
             (c.disable ? c.disable : "(unset)") + " asked " + std::to_string(c.asked);
    if (c.enable) setenv("KILN_ENABLE", c.enable, 1);
    else unsetenv("KILN_ENABLE");
    if (c.disable) setenv("KILN_DISABLE", c.disable, 1);
    else unsetenv("KILN_DISABLE");
    uint32_t got = 0xffffffff;
    CHECK(status_of([&] { got = fast_path_with_env(c.asked); }) == KILN_OK);
    CHECK(got == c.want);
  }
  unsetenv("KILN_ENABLE");
  for (const char *var : {"KILN_DISABLE", "KILN_ENABLE"}) {
    const char *other = std::string(var) == "KILN_DISABLE" ? "KILN_ENABLE" : "KILN_DISABLE";
    unsetenv(other);
    for (const char *bad : {"bogus", "graphs,bogus", "Graphs", "graphs cudnn"}) {
      g_case = std::string(var) + "=" + bad;
      setenv(var, bad, 1);
      std::string message;
      CHECK(status_of([] { fast_path_with_env(kFastDefault); }, &message) == KILN_ERROR_INVALID_ARGUMENT);
      CHECK(message.find(var) != std::string::npos);
    }
    g_case = std::string(var) + " names the bad entry";
    setenv(var, "cudnn,bogus", 1);
    std::string message;
    status_of([] { fast_path_with_env(kFastDefault); }, &message);
    CHECK(message.find("\"bogus\"") != std::string::npos);
    unsetenv(var);
  }
}

}  // namespace

// The op-level cases run on the CPU; the compiled program on the CPU and on
// cuda:0 when usable. KILN_TEST_DEVICE=cpu (program_test) runs only the CPU
// part; KILN_TEST_DEVICE=cuda (program_test_cuda) only the CUDA part, and
// exits 77 (skipped) without a device.
int main() {
  return test::run_suite(
      "programs", 2,
      [](Context &ctx) {
        Backend &be = ctx.cpu();
        test_op_names();
        test_fast_path_with_env();
        test_gather_cast_activation(be);
        test_linear(be);
        test_dropout_loss_clip(be);
        test_optimizer_ops(be);
        test_compile_default(ctx);
        test_fused_sgd(ctx);
        test_program_writes(ctx);
        test_compiled_program(ctx, be, -1, "cpu");
        test_step_builder(ctx);
      },
      [](Context &ctx) { test_compiled_program(ctx, ctx.backend(Device::cuda(0)), 0, "cuda:0"); });
}
