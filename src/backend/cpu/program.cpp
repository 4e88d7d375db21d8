// The CPU's compilation of step programs; see program.hpp.
#include "backend/cpu/program.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "backend/cpu/flush_denormals.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/step_threading.hpp"

namespace kiln::cpu {

namespace {

// A Linear layer whose weights take their SGD update in the weight-gradient
// product: the parameters its gradients stand for.
struct FusedLayer {
  void *w = nullptr;
  void *b = nullptr;  // null when the layer has no bias
};

// The parameter that the `count` gradients at `g` stand for, when they lie
// inside the SgdOp's gradient buffer; else null.
void *parameter_of(const SgdArgs &sgd, const void *g, int64_t count) {
  const uintptr_t esize = uintptr_t(dtype_size(sgd.t));
  const uintptr_t grads = reinterpret_cast<uintptr_t>(sgd.grads), at = reinterpret_cast<uintptr_t>(g);
  if (!g || at < grads || (at - grads) % esize != 0 || count > sgd.n) return nullptr;
  const uintptr_t offset = (at - grads) / esize;
  if (offset > uintptr_t(sgd.n - count)) return nullptr;
  return static_cast<char *>(sgd.params) + offset * esize;
}

// The fused layers, one per op (an entry with w null: not fused), when the
// whole update can fold into the products (program.hpp says when); else
// empty.
std::vector<FusedLayer> plan_fused_sgd(const StepProgram &p) {
  if (!p.trains || !(p.fast_path & kFastEpilogues) || p.ops.empty()) return {};
  const SgdOp *update = std::get_if<SgdOp>(&p.ops.back());
  if (!update) return {};
  const SgdArgs &sgd = update->args;
  if (sgd.t != DType::F32 || sgd.momentum != 0 || sgd.nesterov) return {};
  std::vector<FusedLayer> layers(p.ops.size());
  for (size_t i = 0; i + 1 < p.ops.size(); ++i) {
    const StepOp &op = p.ops[i];
    // Anything that reads or writes the gradients between the backward and
    // the update (or a second update) needs them written out.
    if (std::holds_alternative<ClipOp>(op) || std::holds_alternative<AllReduceStartOp>(op) ||
        std::holds_alternative<AllReduceWaitOp>(op) || std::holds_alternative<CastOp>(op) ||
        std::holds_alternative<SgdOp>(op) || std::holds_alternative<AdamOp>(op))
      return {};
    const auto *lb = std::get_if<LinearBackwardOp>(&op);
    if (!lb) continue;
    if (lb->t != DType::F32) return {};
    FusedLayer &layer = layers[i];
    layer.w = parameter_of(sgd, lb->dw, lb->out * lb->in);
    // The product reads W through lb->w: it must be the parameter itself.
    if (!layer.w || layer.w != lb->w) return {};
    if (lb->db) {
      layer.b = parameter_of(sgd, lb->db, lb->out);
      if (!layer.b) return {};
    }
  }
  // What no layer covers is the flat buffer's padding between parameters:
  // zeros whose gradients stay zero, which SGD would leave as they are.
  return layers;
}

class CpuExecutable final : public Executable {
 public:
  CpuExecutable(Backend &b, ThreadPool &pool, int64_t index, const StepProgram &p)
      : Executable(p),
        backend_(b),
        pool_(pool),
        index_(index),
        program_(p),
        fused_(plan_fused_sgd(p)),
        threading_(pool.size()) {}

  std::string describe() const override {
    if (fused_.empty()) return "kernels";
    const auto layers = std::count_if(fused_.begin(), fused_.end(), [](const FusedLayer &l) { return l.w; });
    return "kernels, SGD fused into " + std::to_string(layers) + " weight-gradient product" + (layers == 1 ? "" : "s");
  }

 protected:
  void run_steps(int64_t first, int64_t count) override {
    using Clock = std::chrono::steady_clock;
    for (int64_t s = first; s < first + count; ++s) {
      if (!threading_.timing()) {
        run_step(program_.table[s]);
        continue;
      }
      std::optional<ThreadPool::SerialScope> alone;
      if (threading_.serial()) alone.emplace();
      const Clock::time_point start = Clock::now();
      run_step(program_.table[s]);
      threading_.record(std::chrono::duration<double>(Clock::now() - start).count());
    }
  }

 private:
  // One step's ops, on the threads that the caller's scope allows.
  void run_step(const StepParams &step) {
    const size_t ops = program_.ops.size();
    for (size_t i = 0; i < ops; ++i) {
      // With fused layers, the last op, the SgdOp, is done by them.
      if (!fused_.empty() && i + 1 == ops) break;
      const StepOp &op = program_.ops[i];
      const auto *backward = std::get_if<LinearBackwardOp>(&op);
      if (backward && !fused_.empty() && fused_[i].w) {
        backward_and_update(*backward, fused_[i], step);
      } else if (backward) {
        linear_backward(*backward);
      } else {
        run_op(backend_, index_, op, &step);
      }
    }
  }

  // The activation's backward and the bias gradient, in one pass where the
  // layer has both (act_backward_bias_grad: the same bits as the two
  // kernels).
  void act_and_bias_backward(const LinearBackwardOp &op) {
    if (op.act != UnaryOp::Identity && op.db) {
      FlushDenormals guard;  // as CpuBackend runs the two kernels
      act_backward_bias_grad(pool_, backward_act(op), bias_grad_of(op));
      return;
    }
    if (op.act != UnaryOp::Identity) backend_.act_backward(index_, backward_act(op));
    if (op.db) backend_.bias_grad(index_, bias_grad_of(op));
  }

  // core/program.cpp's linear_backward, in its order, with
  // act_and_bias_backward.
  void linear_backward(const LinearBackwardOp &op) {
    act_and_bias_backward(op);
    backend_.gemm(index_, weight_grad_product(op));
    if (op.dx) backend_.gemm(index_, input_grad_product(op));
  }

  // linear_backward's kernels, in its order (the bias gradient while dy is
  // in the cache), with the update folded in: dx first, while W still holds
  // this step's weights.
  void backward_and_update(const LinearBackwardOp &op, const FusedLayer &layer, const StepParams &step) {
    const SgdArgs &sgd = std::get<SgdOp>(program_.ops.back()).args;
    act_and_bias_backward(op);
    if (op.dx) backend_.gemm(index_, input_grad_product(op));
    GemmArgs update = weight_grad_product(op);
    update.c = layer.w;
    update.alpha = -step.lr;
    update.beta = 1 - step.lr * sgd.weight_decay;
    backend_.gemm(index_, update);
    if (layer.b) {
      SgdArgs bias = sgd;
      bias.n = op.out;
      bias.params = layer.b;
      bias.grads = op.db;
      backend_.sgd_update(index_, bias, &step);
    }
  }

  Backend &backend_;
  ThreadPool &pool_;  // backend_'s
  int64_t index_;
  StepProgram program_;
  std::vector<FusedLayer> fused_;  // per op; empty: nothing fused
  StepThreading threading_;        // each step on the pool or on the caller alone
};

}  // namespace

std::unique_ptr<Executable> compile_cpu(Backend &backend, ThreadPool &pool, int64_t index,
                                        const StepProgram &program) {
  return std::make_unique<CpuExecutable>(backend, pool, index, program);
}

}  // namespace kiln::cpu
