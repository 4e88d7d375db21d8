// The CUDA plugin's host-side planning, which is plain C++ (no CUDA) in
// kiln_internal, so it runs here without a GPU:
//  - GraphRuns (planning/graph_runs.hpp) against a step launcher that can
//    fail a capture or a launch: every step runs exactly once, in order,
//    whatever fails, graphs go off for good after a failure with one report,
//    the cache limits hold, later epochs reuse the first epoch's graph, and
//    every captured graph is destroyed once;
//  - plan_epilogues (planning/epilogue_plan.hpp) on step programs built op
//    by op: which products pair into which cuBLASLt epilogues, and what
//    happens when the heuristic refuses one half of a pair;
//  - find_narrow_step (planning/narrow_step.hpp): which programs are the
//    narrow one-hidden-layer step, with every buffer where the ops name it,
//    and each condition it checks refusing on its own;
//  - TimingGuard (planning/timing_guard.hpp) on host memory: every buffer a
//    Linear op's timing fills or writes is back as it was afterwards (also
//    when the timing throws, also with aliased buffers), fills come before
//    the timing, weights are never touched, and a failed save changes
//    nothing and keeps nothing;
//  - lt_product (planning/lt_layout.hpp): the column-major layouts and
//    leading dimensions handed to cuBLASLt, run through a naive strided
//    column-major product with cuBLAS's semantics and compared with the
//    row-major product computed directly.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/planning/epilogue_plan.hpp"
#include "backend/cuda/planning/graph_runs.hpp"
#include "backend/cuda/planning/lt_layout.hpp"
#include "backend/cuda/planning/narrow_step.hpp"
#include "backend/cuda/planning/timing_guard.hpp"
#include "backend_harness.hpp"
#include "core/error.hpp"

using namespace kiln;
using namespace kiln::cuda;
using kiln::test::g_case;

namespace {

void check(bool ok, const std::string &what) { kiln::test::expect(ok, what); }

// ---- graph runs ---------------------------------------------------------------

// Applies steps as a device would: through the cursor, through captured
// graphs (each `steps` steps from the cursor), or from the table.
class FakeLauncher final : public StepLauncher {
 public:
  std::vector<int64_t> applied;      // steps in the order they ran
  std::vector<int64_t> captured;     // lengths, in capture order
  std::multiset<Graph> destroyed;
  int captures = 0, launches = 0;    // calls so far
  int fail_capture = -1;             // the capture call (0-based) that fails; -1: none
  int fail_launch = -1;              // the launch call (0-based) that fails
  int64_t cursor = -1;

  void set_cursor(int64_t first) override { cursor = first; }
  void run_cursor_step() override { applied.push_back(cursor++); }
  Graph capture(int64_t steps) override {
    if (captures++ == fail_capture)
      fail(KILN_ERROR_BACKEND, "cudaStreamEndCapture failed: cudaErrorStreamCaptureUnsupported (planted)");
    captured.push_back(steps);
    lengths_[graph_id(captured.size())] = steps;
    return graph_id(captured.size());
  }
  void launch(Graph g) override {
    if (launches++ == fail_launch) fail(KILN_ERROR_BACKEND, "cudaGraphLaunch failed (planted)");
    for (int64_t s = 0; s < lengths_.at(g); ++s) applied.push_back(cursor++);
  }
  void destroy(Graph g) noexcept override { destroyed.insert(g); }
  void run_table_steps(int64_t first, int64_t count) override {
    for (int64_t s = first; s < first + count; ++s) applied.push_back(s);
  }
  size_t graphs_made() const { return captured.size(); }

 private:
  static Graph graph_id(size_t n) { return reinterpret_cast<Graph>(uintptr_t(n)); }
  std::map<Graph, int64_t> lengths_;
};

// Steps 0 .. n - 1, each once, in order.
bool each_step_once(const std::vector<int64_t> &applied, int64_t n) {
  if (int64_t(applied.size()) != n) return false;
  for (int64_t i = 0; i < n; ++i)
    if (applied[size_t(i)] != i) return false;
  return true;
}

void graph_runs() {
  g_case = "graphs: a plain epoch";
  {
    FakeLauncher f;
    std::vector<std::string> reports;
    {
      GraphRuns runs(f, [&](const std::string &why) { reports.push_back(why); });
      runs.run(0, 10);    // the first step eager, then a graph of 9
      runs.run(10, 9);    // the same length: the cached graph
      runs.run(19, 1);    // the one-step graph
      runs.run(20, 0);    // nothing
      check(each_step_once(f.applied, 20), "steps 0..19 ran once each, in order");
      check(f.captured == std::vector<int64_t>({9, 1}), "graphs of 9 and 1 steps, each captured once");
      check(reports.empty() && !runs.fell_back(), "no fallback");
      check(runs.describe() == "CUDA graphs of 1, 9 steps", "describe: " + runs.describe());
    }
    check(f.destroyed.size() == 2, "both graphs destroyed once");
  }

  g_case = "graphs: the first capture fails";
  {
    FakeLauncher f;
    f.fail_capture = 0;
    std::vector<std::string> reports;
    GraphRuns runs(f, [&](const std::string &why) { reports.push_back(why); });
    runs.run(0, 10);  // warm step, capture(9) fails: 1..9 eagerly
    runs.run(10, 5);  // eager from now on, no capture tried
    runs.run(15, 1);
    check(each_step_once(f.applied, 16), "steps 0..15 ran once each, in order (the warm step counted)");
    check(f.captures == 1, "no capture is tried again after one failed");
    check(reports.size() == 1 && reports[0].find("cudaErrorStreamCaptureUnsupported") != std::string::npos,
          "the reason is reported once");
    check(runs.fell_back() && runs.describe().find("off after a failed capture") != std::string::npos,
          "describe says graphs are off");
  }

  g_case = "graphs: a later capture fails, earlier graphs go";
  {
    FakeLauncher f;
    f.fail_capture = 1;  // the graph of 9 is made, the one of 4 fails
    int reports = 0;
    {
      GraphRuns runs(f, [&](const std::string &) { ++reports; });
      runs.run(0, 10);
      runs.run(10, 4);
      runs.run(14, 9);  // the graph of 9 is gone too: eager
      check(each_step_once(f.applied, 23), "steps 0..22 ran once each, in order");
      check(reports == 1, "one report");
      check(f.destroyed.size() == 1, "the graph made before the failure was destroyed at the fallback");
    }
    check(f.destroyed.size() == 1, "and not destroyed twice");
  }

  g_case = "graphs: later epochs reuse the first epoch's graph";
  {
    // The first epoch of n steps runs one eagerly and captures n - 1; every
    // later epoch of n steps is that graph and one one-step launch, with no
    // capture of n (on the H200, capturing 422 steps again made epoch 2 of
    // 784-32-10 four times slower than epoch 3).
    FakeLauncher f;
    GraphRuns runs(f, nullptr);
    const int64_t n = 422;
    for (int64_t epoch = 0; epoch < 3; ++epoch) runs.run(epoch * n, n);
    check(each_step_once(f.applied, 3 * n), "three epochs' steps ran once each, in order");
    check(f.captured == std::vector<int64_t>({n - 1, 1}), "graphs of n - 1 and 1 steps only");
    check(f.launches == 1 + 2 + 2, "one launch in the first epoch, two in each later one");
    // A run kTopUpSteps longer still tops up; one longer than that captures.
    runs.run(3 * n, n - 1 + GraphRuns::kTopUpSteps);
    check(f.captured.size() == 2, "n - 1 + kTopUpSteps: topped up");
    const int64_t at = 4 * n - 1 + GraphRuns::kTopUpSteps;
    runs.run(at, n + GraphRuns::kTopUpSteps);
    check(f.captured.size() == 3 && f.captured.back() == n + GraphRuns::kTopUpSteps,
          "n + kTopUpSteps: a graph of its own");
    check(each_step_once(f.applied, at + n + GraphRuns::kTopUpSteps), "and every step still once, in order");
    // A shorter run never takes a longer graph.
    runs.run(at + n + GraphRuns::kTopUpSteps, 5);
    check(f.captured.size() == 4 && f.captured.back() == 5, "5 steps: captured, not cut from a longer graph");
  }

  g_case = "graphs: a failed launch of a topped-up graph";
  {
    FakeLauncher f;
    GraphRuns runs(f, nullptr);
    runs.run(0, 10);  // warm + graph of 9
    f.fail_launch = 2;  // the one-step launch after the graph of 9 in the next run
    runs.run(10, 10);
    check(each_step_once(f.applied, 20), "the graph's 9 steps, then the 10th eagerly");
    check(runs.fell_back(), "graphs are off");
  }

  g_case = "graphs: a launch fails midway through one-step graphs";
  {
    FakeLauncher f;
    f.fail_launch = 3;  // long runs replay the one-step graph; its 4th launch fails
    GraphRuns runs(f, nullptr);
    runs.run(0, 1 + GraphRuns::kMaxGraphSteps + 6);
    check(each_step_once(f.applied, 1 + GraphRuns::kMaxGraphSteps + 6),
          "every step ran once: three by graph, the rest eagerly");
    check(f.captured == std::vector<int64_t>({1}), "only the one-step graph: longer runs are not captured");
    check(runs.fell_back(), "graphs are off");
  }

  g_case = "graphs: at most kMaxGraphs lengths";
  {
    FakeLauncher f;
    GraphRuns runs(f, nullptr);
    int64_t next = 0;
    runs.run(next, 1), next += 1;  // the warm step
    // lengths further apart than kTopUpSteps: each would be captured
    const int64_t apart = GraphRuns::kTopUpSteps + 1;
    for (int64_t k = 1; k < 1 + int64_t(GraphRuns::kMaxGraphs) + 3; ++k) runs.run(next, k * apart), next += k * apart;
    check(each_step_once(f.applied, next), "every step ran once, in order");
    check(f.graphs_made() == GraphRuns::kMaxGraphs + 1, "kMaxGraphs lengths and the one-step graph");
  }

  g_case = "graphs: the warm step alone";
  {
    FakeLauncher f;
    f.fail_capture = 0;
    int reports = 0;
    GraphRuns runs(f, [&](const std::string &) { ++reports; });
    runs.run(5, 1);
    check(f.applied == std::vector<int64_t>({5}) && f.captures == 0 && reports == 0,
          "one step: eager, nothing captured");
    runs.run(6, 2);
    check(f.applied == std::vector<int64_t>({5, 6, 7}) && reports == 1, "then the failed capture falls back");
  }
}

// ---- epilogue planning --------------------------------------------------------

// Distinct fake addresses for the buffers of a program (never dereferenced).
void *buf(int n) { return reinterpret_cast<void *>(uintptr_t(0x1000 * n)); }

LinearOp linear(int64_t rows, int64_t in, int64_t out, int x, int y, int b, UnaryOp act, DType t = DType::F32) {
  LinearOp op;
  op.t = t, op.rows = rows, op.in = in, op.out = out;
  op.x = buf(x), op.w = buf(100 + y), op.b = b ? buf(b) : nullptr, op.y = buf(y);
  op.act = act;
  return op;
}

LinearBackwardOp backward(const LinearOp &f, int dy, int dx, int db) {
  LinearBackwardOp op;
  op.t = f.t, op.rows = f.rows, op.in = f.in, op.out = f.out;
  op.dy = buf(dy), op.x = f.x, op.w = f.w, op.y = f.y, op.pre = f.pre, op.act = f.act;
  op.dw = buf(200 + dy), op.db = db ? buf(db) : nullptr, op.dx = dx ? buf(dx) : nullptr;
  return op;
}

// 784-32-10 with ReLU: [gather, linear0, linear1, loss, backward1, backward0, sgd].
std::vector<StepOp> mlp(UnaryOp hidden = UnaryOp::Relu, DType t = DType::F32) {
  const LinearOp l0 = linear(128, 784, 32, 1, 2, 3, hidden, t), l1 = linear(128, 32, 10, 2, 4, 5, UnaryOp::Identity, t);
  return {GatherOp{}, l0, l1, LossOp{}, backward(l1, 10, 11, 12), backward(l0, 11, 0, 13), SgdOp{}};
}

std::string describe(const EpiloguePlan &p) {
  std::string s;
  for (const FusedProduct &f : p.products) {
    s += (s.empty() ? "" : " ") + std::to_string(f.op) + ":" +
         (f.product == ProductKind::Forward ? "fwd" : f.product == ProductKind::WeightGrad ? "dw" : "dx") + "=" +
         epilogue_name(f.epilogue) + (f.pair >= 0 ? "#" + std::to_string(f.pair) : "");
  }
  return s;
}

EpiloguePlan plan_with(const std::vector<StepOp> &ops, uint32_t fast,
                       const std::function<bool(const FusedProduct &)> &try_fuse) {
  return plan_epilogues(ops, fast, find_relu_pairs(ops, fast), try_fuse);
}

void epilogue_planning() {
  const auto accept = [](const FusedProduct &) { return true; };

  g_case = "epilogues: an MLP with a ReLU layer";
  {
    const auto ops = mlp();
    const auto pairs = find_relu_pairs(ops, kFastDefault);
    check(pairs.size() == 1 && pairs[0].forward == 1 && pairs[0].above == 4 && pairs[0].below == 5,
          "one ReLU pair: forward 1, above 4, below 5");
    check(pairs[0].mask_ld == 128 && pairs[0].mask_bytes == 128 / 8 * 128, "the mask: 128 bits per row, 128 rows");
    const EpiloguePlan p = plan_with(ops, kFastDefault, accept);
    check(describe(p) == "1:fwd=RELU_AUX_BIAS#0 2:fwd=BIAS 4:dw=BGRADB 4:dx=DRELU_BGRAD#0",
          "products: " + describe(p));
    check(p.used == std::vector<bool>({true}) && p.act_done[5] && !p.act_done[4],
          "the lower layer's backward finds dy * relu' and db done");
  }

  g_case = "epilogues: the heuristic refuses DRELU_BGRAD";
  {
    const EpiloguePlan p = plan_with(mlp(), kFastDefault, [](const FusedProduct &f) {
      return f.epilogue != EpilogueKind::DReluBgrad;
    });
    check(describe(p) == "1:fwd=RELU_BIAS 2:fwd=BIAS 4:dw=BGRADB 5:dw=BGRADB",
          "the pair goes, each layer keeps its plain epilogues: " + describe(p));
    check(p.used == std::vector<bool>({false}) && !p.act_done[5], "nothing is left done for the lower layer");
  }

  g_case = "epilogues: the heuristic refuses everything";
  {
    const EpiloguePlan p = plan_with(mlp(), kFastDefault, [](const FusedProduct &) { return false; });
    check(p.products.empty() && !p.act_done[5], "every product runs as plain cuBLAS and kernels");
  }

  g_case = "epilogues: switched off, f64, GELU, a kept pre-activation";
  {
    check(plan_with(mlp(), kFastGraphs, accept).products.empty(), "without kFastEpilogues nothing is fused");
    check(plan_with(mlp(UnaryOp::Relu, DType::F64), kFastDefault, accept).products.empty(), "f64: legacy cuBLAS");
    const EpiloguePlan gelu = plan_with(mlp(UnaryOp::Gelu), kFastDefault, accept);
    check(describe(gelu) == "2:fwd=BIAS 4:dw=BGRADB 5:dw=BGRADB", "GELU stays on kernels: " + describe(gelu));
    auto ops = mlp();
    std::get<LinearOp>(ops[1]).pre = buf(50);
    std::get<LinearBackwardOp>(ops[5]).pre = buf(50);
    check(describe(plan_with(ops, kFastDefault, accept)) == "2:fwd=BIAS 4:dw=BGRADB 5:dw=BGRADB",
          "a kept pre-activation is not fused");
  }

  g_case = "epilogues: what may stand between the two backward ops";
  {
    auto ops = mlp();
    AllReduceStartOp start;
    ops.insert(ops.begin() + 5, CastOp{});
    ops.insert(ops.begin() + 5, start);  // a gradient bucket after backward1: [.., 4 bw1, 5 start, 6 cast, 7 bw0, ..]
    const EpiloguePlan p = plan_with(ops, kFastDefault, accept);
    check(describe(p) == "1:fwd=RELU_AUX_BIAS#0 2:fwd=BIAS 4:dw=BGRADB 4:dx=DRELU_BGRAD#0",
          "a bucket's start and cast keep the pair: " + describe(p));
    auto with_dropout = mlp();
    DropoutBackwardOp drop;
    with_dropout.insert(with_dropout.begin() + 5, drop);
    auto &below = std::get<LinearBackwardOp>(with_dropout[6]);
    below.dy = buf(30);  // dropout's backward writes the dy the ReLU layer reads
    check(find_relu_pairs(with_dropout, kFastDefault).empty(), "dropout between: no pair");
  }

  g_case = "epilogues: two ReLU layers, 300 features";
  {
    const LinearOp l0 = linear(64, 784, 300, 1, 2, 3, UnaryOp::Relu), l1 = linear(64, 300, 64, 2, 4, 5, UnaryOp::Relu),
                   l2 = linear(64, 64, 10, 4, 6, 7, UnaryOp::Identity);
    const std::vector<StepOp> ops = {l0, l1, l2, LossOp{}, backward(l2, 10, 11, 12), backward(l1, 11, 13, 14),
                                     backward(l0, 13, 0, 15), AdamOp{}};
    const auto pairs = find_relu_pairs(ops, kFastAll);
    check(pairs.size() == 2 && pairs[0].mask_ld == 128 && pairs[1].mask_ld == 384,
          "two pairs; 300 features round up to 384 bits");
    const EpiloguePlan p = plan_with(ops, kFastAll, accept);
    // Layer 1's db comes from layer 2's DRELU_BGRAD, so its dW product takes none.
    check(describe(p) == "0:fwd=RELU_AUX_BIAS#1 1:fwd=RELU_AUX_BIAS#0 2:fwd=BIAS 4:dw=BGRADB 4:dx=DRELU_BGRAD#0 "
                         "5:dx=DRELU_BGRAD#1",
          "products: " + describe(p));
    check(p.act_done[5] && p.act_done[6] && !p.act_done[4], "both lower layers' ReLU gradients done above them");
  }
  check(relu_mask_ld(1) == 128 && relu_mask_ld(128) == 128 && relu_mask_ld(129) == 256, "mask ld rounds to 128");
}

// ---- the narrow step -------------------------------------------------------------

// `in`-`hidden`-`classes` as the trainer builds it: [gather, linear0,
// linear1, loss, backward1, backward0, sgd], each op reading what the one
// before it wrote.
std::vector<StepOp> narrow_mlp(int64_t in = 784, int64_t hidden = 32, int64_t classes = 10) {
  const LinearOp l0 = linear(128, in, hidden, 1, 2, 3, UnaryOp::Relu),
                 l1 = linear(128, hidden, classes, 2, 4, 5, UnaryOp::Identity);
  LossOp loss;
  loss.args.rows = 128, loss.args.cols = classes;
  loss.args.pred = l1.y, loss.args.target = buf(20), loss.args.dpred = buf(10);
  loss.args.grad_scale = 1.0 / 128, loss.args.label_smoothing = 0.1;
  loss.args.stats = static_cast<double *>(buf(21));
  return {GatherOp{}, l0, l1, loss, backward(l1, 10, 11, 12), backward(l0, 11, 0, 13), SgdOp{}};
}

template <class Op> Op &op_at(std::vector<StepOp> &ops, size_t i) { return std::get<Op>(ops[i]); }

void narrow_step_planning() {
  g_case = "narrow: 784-32-10";
  {
    std::vector<StepOp> ops = narrow_mlp();
    const std::optional<NarrowStep> s = find_narrow_step(ops, kFastNarrow);
    check(s.has_value(), "the tutorial's step is a narrow step");
    if (s) {
      check(s->first == 1 && s->last == 5, "it covers the five ops from linear0 to backward0");
      check(s->rows == 128 && s->in == 784 && s->hidden == 32 && s->classes == 10, "its shape");
      check(s->x == buf(1) && s->w1 == buf(102) && s->b1 == buf(3) && s->h == buf(2), "the hidden layer's buffers");
      check(s->w2 == buf(104) && s->b2 == buf(5) && s->logits == buf(4), "the output layer's buffers");
      check(s->labels == buf(20) && s->dlogits == buf(10) && s->stats == buf(21), "the loss's buffers");
      check(s->grad_scale == 1.0 / 128 && s->smoothing == 0.1, "the loss's scale and smoothing");
      check(s->dh == buf(11) && s->dw2 == buf(210) && s->db2 == buf(12), "the second backward's buffers");
      check(s->dw1 == buf(211) && s->db1 == buf(13), "the first backward's buffers");
      check(s->act == UnaryOp::Relu, "its activation");
    }
    check(!find_narrow_step(ops, kFastAll & ~uint32_t(kFastNarrow)), "not without kFastNarrow");
  }
  g_case = "narrow: limits and variants it takes";
  {
    check(find_narrow_step(narrow_mlp(5, 64, 32), kFastNarrow).has_value(), "64 hidden units and 32 classes");
    check(find_narrow_step(narrow_mlp(1, 1, 1), kFastNarrow).has_value(), "1-1-1");
    std::vector<StepOp> ops = narrow_mlp();
    op_at<LinearOp>(ops, 1).act = UnaryOp::Identity, op_at<LinearBackwardOp>(ops, 5).act = UnaryOp::Identity;
    op_at<LinearOp>(ops, 1).b = nullptr, op_at<LinearBackwardOp>(ops, 5).db = nullptr;
    op_at<LinearOp>(ops, 2).b = nullptr, op_at<LinearBackwardOp>(ops, 4).db = nullptr;
    const std::optional<NarrowStep> s = find_narrow_step(ops, kFastNarrow);
    check(s && s->act == UnaryOp::Identity && !s->b1 && !s->b2 && !s->db1 && !s->db2,
          "an identity hidden layer without biases");
  }
  // Each condition alone refuses.
  const std::pair<const char *, std::function<void(std::vector<StepOp> &)>> refusals[] = {
      {"65 hidden units", [](std::vector<StepOp> &o) { o = narrow_mlp(784, 65, 10); }},
      {"33 classes", [](std::vector<StepOp> &o) { o = narrow_mlp(784, 32, 33); }},
      {"bf16", [](std::vector<StepOp> &o) { op_at<LinearOp>(o, 1).t = DType::BF16; }},
      {"f64 loss", [](std::vector<StepOp> &o) { op_at<LossOp>(o, 3).args.t = DType::F64; }},
      {"a TF32 forward", [](std::vector<StepOp> &o) { op_at<LinearOp>(o, 1).math = MathMode::Tf32; }},
      {"a TF32 backward", [](std::vector<StepOp> &o) { op_at<LinearBackwardOp>(o, 5).math = MathMode::Tf32; }},
      {"GELU", [](std::vector<StepOp> &o) {
         op_at<LinearOp>(o, 1).act = UnaryOp::Gelu, op_at<LinearBackwardOp>(o, 5).act = UnaryOp::Gelu;
       }},
      {"a kept pre-activation", [](std::vector<StepOp> &o) { op_at<LinearOp>(o, 1).pre = buf(30); }},
      {"an activated output layer", [](std::vector<StepOp> &o) { op_at<LinearOp>(o, 2).act = UnaryOp::Relu; }},
      {"MSE", [](std::vector<StepOp> &o) { op_at<LossOp>(o, 3).kind = KILN_LOSS_MSE; }},
      {"a loss without gradient", [](std::vector<StepOp> &o) { op_at<LossOp>(o, 3).args.dpred = nullptr; }},
      {"a loss of other logits", [](std::vector<StepOp> &o) { op_at<LossOp>(o, 3).args.pred = buf(40); }},
      {"a backward of another gradient", [](std::vector<StepOp> &o) { op_at<LinearBackwardOp>(o, 4).dy = buf(41); }},
      {"a first layer with dx", [](std::vector<StepOp> &o) { op_at<LinearBackwardOp>(o, 5).dx = buf(42); }},
      {"a second layer without dx", [](std::vector<StepOp> &o) { op_at<LinearBackwardOp>(o, 4).dx = nullptr; }},
      {"backward of another input", [](std::vector<StepOp> &o) { op_at<LinearBackwardOp>(o, 5).x = buf(43); }},
      {"a bias without its gradient", [](std::vector<StepOp> &o) { op_at<LinearBackwardOp>(o, 5).db = nullptr; }},
      {"an op between", [](std::vector<StepOp> &o) { o.insert(o.begin() + 3, DropoutOp{}); }},
      {"rows that differ", [](std::vector<StepOp> &o) { op_at<LinearOp>(o, 2).rows = 64; }},
      {"another Linear op", [](std::vector<StepOp> &o) { o.push_back(linear(128, 10, 10, 4, 6, 0, UnaryOp::Relu)); }},
  };
  for (const auto &[what, change] : refusals) {
    g_case = std::string("narrow refuses: ") + what;
    std::vector<StepOp> ops = narrow_mlp();
    change(ops);
    check(!find_narrow_step(ops, kFastAll), std::string("not a narrow step: ") + what);
  }
}

// ---- cuBLASLt layouts -----------------------------------------------------------

// C = op(A) op(B) with cuBLAS's column-major semantics and leading
// dimensions (the naive triple loop, strided).
void colmajor_gemm(bool transa, bool transb, int64_t m, int64_t n, int64_t k, const double *a, int64_t lda,
                   const double *b, int64_t ldb, double *c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) {
        const double av = transa ? a[l + i * lda] : a[i + l * lda];
        const double bv = transb ? b[j + l * ldb] : b[l + j * ldb];
        s += av * bv;
      }
      c[i + j * ldc] = s;
    }
}

void lt_layouts() {
  g_case = "cuBLASLt layouts";
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> small(-8, 8);
  const int64_t sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {127, 1, 3}, {4, 130, 33}, {1, 64, 784}};
  for (const auto &size : sizes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        GemmArgs g;
        g.m = size[0], g.n = size[1], g.k = size[2], g.trans_a = ta, g.trans_b = tb;
        const int64_t m = g.m, n = g.n, k = g.k;
        // Row-major storage: A [m, k] (or [k, m] when trans_a), B [k, n] (or [n, k]).
        std::vector<double> a(size_t(m * k)), b(size_t(k * n)), want(size_t(m * n)), got(size_t(m * n), -1);
        for (double &v : a) v = small(rng);
        for (double &v : b) v = small(rng);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (int64_t l = 0; l < k; ++l)
              s += (ta ? a[size_t(l * m + i)] : a[size_t(i * k + l)]) * (tb ? b[size_t(j * k + l)] : b[size_t(l * n + j)]);
            want[size_t(i * n + j)] = s;
          }
        const LtProduct p = lt_product(g);
        const std::string where = "m n k " + std::to_string(m) + " " + std::to_string(n) + " " + std::to_string(k) +
                                  (ta ? " A^T" : "") + (tb ? " B^T" : "");
        // Each layout is a valid column-major description of the stored matrix.
        for (const LtMatrix &mat : {p.first, p.second, p.out})
          check(mat.ld >= mat.rows && mat.rows * mat.cols > 0, where + ": ld >= rows");
        check(p.first.rows * p.first.cols == k * n && p.second.rows * p.second.cols == m * k &&
                  p.out.rows == n && p.out.cols == m,
              where + ": stored shapes");
        // op(first) is [p.m, p.k] and op(second) [p.k, p.n] as cuBLAS reads them.
        check((p.trans_first ? p.first.cols : p.first.rows) == p.m && (p.trans_second ? p.second.rows : p.second.cols) == p.n,
              where + ": operand shapes agree with m, n, k");
        colmajor_gemm(p.trans_first, p.trans_second, p.m, p.n, p.k, b.data(), p.first.ld, a.data(), p.second.ld,
                      got.data(), p.out.ld);
        check(got == want, where + ": the column-major product is the row-major one");
      }
}

// ---- the timing guard ----------------------------------------------------------

// Host memory that counts what it hands out and fails its n-th operation
// when asked to.
class HostTimingMemory final : public TimingMemory {
 public:
  int live = 0, ops = 0, fail_at = -1;
  void *alloc(int64_t bytes) override {
    step();
    ++live;
    return std::malloc(size_t(bytes));
  }
  void release(void *p) noexcept override {
    --live;
    std::free(p);
  }
  void copy(void *dst, const void *src, int64_t bytes) override {
    step();
    std::memcpy(dst, src, size_t(bytes));
  }
  void fill(void *p, int64_t bytes) override {
    step();
    std::memset(p, 0x3c, size_t(bytes));
  }

 private:
  void step() {
    if (ops++ == fail_at) fail(KILN_ERROR_INTERNAL, "injected failure");
  }
};

// Buffers of float with distinct contents, and their first values kept.
struct HostBuffers {
  std::vector<std::vector<float>> data;
  std::vector<std::vector<float>> original;
  float *make(int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(data.size() * 1000 + i) + 0.5f;
    data.push_back(v);
    original.push_back(v);
    return data.back().data();
  }
  bool intact() const { return data == original; }
};

bool filled(const float *p, int64_t n) {
  const unsigned char *b = reinterpret_cast<const unsigned char *>(p);
  for (int64_t i = 0; i < n * int64_t(sizeof(float)); ++i)
    if (b[i] != 0x3c) return false;
  return true;
}

// What a timing does to the op's outputs: writes every one.
void scribble(const LinearBackwardOp &op) {
  for (auto [p, n] : {std::pair<void *, int64_t>{op.dy, op.rows * op.out}, {op.dw, op.out * op.in}, {op.db, op.out},
                      {op.dx, op.rows * op.in}})
    if (p) std::fill_n(static_cast<float *>(p), n, -7.0f);
}

void timing_guard() {
  const int64_t rows = 5, in = 3, out = 4;
  {
    g_case = "timing guard: a Linear backward";
    HostBuffers h;
    LinearBackwardOp op;
    op.rows = rows, op.in = in, op.out = out, op.act = UnaryOp::Relu;
    op.dy = h.make(rows * out), op.x = h.make(rows * in), op.w = h.make(out * in), op.y = h.make(rows * out);
    op.dw = h.make(out * in), op.db = h.make(out), op.dx = h.make(rows * in);
    const std::vector<float> weights = h.data[2];
    HostTimingMemory m;
    {
      TimingGuard guard(m, timed_buffers(op));
      check(filled(static_cast<float *>(op.dy), rows * out) && filled(static_cast<const float *>(op.x), rows * in) &&
                filled(static_cast<const float *>(op.y), rows * out),
            "the inputs a step writes first are filled before the timing");
      check(h.data[2] == weights, "the weights are not filled");
      scribble(op);
      guard.restore();
    }
    check(h.intact(), "every buffer is back as it was");
    check(m.live == 0, "every copy is freed");
  }
  {
    g_case = "timing guard: a Linear forward with its pre-activation";
    HostBuffers h;
    LinearOp op;
    op.rows = rows, op.in = in, op.out = out, op.act = UnaryOp::Relu;
    op.x = h.make(rows * in), op.w = h.make(out * in), op.b = h.make(out), op.y = h.make(rows * out),
    op.pre = h.make(rows * out);
    const std::vector<TimedBuffer> list = timed_buffers(op);
    check(list.size() == 3, "x, y and pre are listed, the weight and bias are not");
    HostTimingMemory m;
    {
      TimingGuard guard(m, list);
      check(filled(static_cast<const float *>(op.x), rows * in), "the input is filled");
      std::fill_n(static_cast<float *>(op.y), rows * out, -1.0f);
      std::fill_n(static_cast<float *>(op.pre), rows * out, -2.0f);
      guard.restore();
    }
    check(h.intact() && m.live == 0, "the batch and the outputs are back, the copies freed");
  }
  {
    g_case = "timing guard: the timing throws";
    HostBuffers h;
    LinearBackwardOp op;
    op.rows = rows, op.in = in, op.out = out;
    op.dy = h.make(rows * out), op.x = h.make(rows * in), op.w = h.make(out * in), op.dw = h.make(out * in);
    HostTimingMemory m;
    try {
      TimingGuard guard(m, timed_buffers(op));
      scribble(op);
      fail(KILN_ERROR_INTERNAL, "the timing failed");
    } catch (const Error &) {
    }
    check(h.intact() && m.live == 0, "the destructor puts everything back and frees the copies");
  }
  {
    g_case = "timing guard: aliased buffers";
    HostBuffers h;
    LinearBackwardOp op;
    op.rows = rows, op.in = in, op.out = out;
    float *shared = h.make(rows * out);
    op.dy = shared, op.y = shared, op.pre = shared, op.x = h.make(rows * in), op.w = h.make(out * in);
    op.dw = h.make(out * in), op.dx = const_cast<void *>(op.x);
    const std::vector<TimedBuffer> list = timed_buffers(op);
    check(list.size() == 3, "each pointer once: dy/y/pre, x/dx, dw");
    bool x_fill = false;
    for (const TimedBuffer &b : list)
      if (b.data == op.x) x_fill = b.fill && b.bytes == rows * in * int64_t(sizeof(float));
    check(x_fill, "a buffer both filled and written keeps its fill");
    HostTimingMemory m;
    {
      TimingGuard guard(m, list);
      scribble(op);
      guard.restore();
    }
    check(h.intact() && m.live == 0, "aliased buffers are back as they were");
  }
  // Three buffers: alloc, copy, alloc, copy, alloc, copy, fill, fill.
  for (int at = 0; at < 8; ++at) {
    g_case = "timing guard: operation " + std::to_string(at) + " of the save and fill fails";
    HostBuffers h;
    LinearBackwardOp op;
    op.rows = rows, op.in = in, op.out = out;
    op.dy = h.make(rows * out), op.x = h.make(rows * in), op.w = h.make(out * in), op.dw = h.make(out * in);
    HostTimingMemory m;
    m.fail_at = at;
    bool threw = false;
    try {
      TimingGuard guard(m, timed_buffers(op));
    } catch (const Error &) {
      threw = true;
    }
    check(threw, "the failure reaches the caller");
    check(h.intact() && m.live == 0, "nothing is changed and nothing kept");
  }
}

}  // namespace

int main() {
  graph_runs();
  epilogue_planning();
  narrow_step_planning();
  lt_layouts();
  timing_guard();
  return kiln::test::finish("cuda_planning_test");
}
