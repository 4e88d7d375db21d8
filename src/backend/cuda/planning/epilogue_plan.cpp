#include "backend/cuda/planning/epilogue_plan.hpp"

#include <map>

namespace kiln::cuda {

const char *epilogue_name(EpilogueKind kind) {
  switch (kind) {
    case EpilogueKind::Bias: return "BIAS";
    case EpilogueKind::Relu: return "RELU";
    case EpilogueKind::ReluBias: return "RELU_BIAS";
    case EpilogueKind::ReluAux: return "RELU_AUX";
    case EpilogueKind::ReluAuxBias: return "RELU_AUX_BIAS";
    case EpilogueKind::DRelu: return "DRELU";
    case EpilogueKind::DReluBgrad: return "DRELU_BGRAD";
    case EpilogueKind::BgradB: return "BGRADB";
  }
  return "?";
}

LinearEngine choose_linear_engine(const LinearOp &op, uint32_t fast_path) {
  if (!(fast_path & kFastEpilogues) || op.t == DType::F64 || op.pre) return LinearEngine::Kernels;
  if (op.act == UnaryOp::Relu || (op.act == UnaryOp::Identity && op.b)) return LinearEngine::CublasLt;
  return LinearEngine::Kernels;
}

// The backward's products take bias gradients and the ReLU gradient of the
// layer below whatever this layer's activation is (its own gradient, if not
// fused into the layer above, runs as a kernel first).
LinearEngine choose_linear_backward_engine(const LinearBackwardOp &op, uint32_t fast_path) {
  if (!(fast_path & kFastEpilogues) || op.t == DType::F64) return LinearEngine::Kernels;
  return LinearEngine::CublasLt;
}

int64_t relu_mask_ld(int64_t out) { return (out + 127) / 128 * 128; }
int64_t relu_mask_bytes(int64_t out, int64_t rows) { return relu_mask_ld(out) / 8 * rows; }

std::vector<ReluPair> find_relu_pairs(const std::vector<StepOp> &ops, uint32_t fast_path) {
  std::map<const void *, size_t> forward_by_y;  // LinearOp index by output
  for (size_t i = 0; i < ops.size(); ++i)
    if (auto *f = std::get_if<LinearOp>(&ops[i])) forward_by_y[f->y] = i;
  std::vector<ReluPair> pairs;
  for (size_t i = 1; i < ops.size(); ++i) {
    const auto *below = std::get_if<LinearBackwardOp>(&ops[i]);
    size_t j = i - 1;  // past a gradient bucket's cast and allreduce start (core/program.hpp)
    while (j > 0 && (std::holds_alternative<AllReduceStartOp>(ops[j]) || std::holds_alternative<CastOp>(ops[j]))) --j;
    const auto *above = std::get_if<LinearBackwardOp>(&ops[j]);
    if (!below || !above || below->act != UnaryOp::Relu || !above->dx || above->dx != below->dy ||
        above->rows != below->rows || above->in != below->out)
      continue;
    auto f = forward_by_y.find(below->y);
    if (f == forward_by_y.end()) continue;
    const LinearOp &fwd = std::get<LinearOp>(ops[f->second]);
    if (fwd.act != UnaryOp::Relu || fwd.rows != below->rows || fwd.out != below->out ||
        choose_linear_engine(fwd, fast_path) != LinearEngine::CublasLt ||
        choose_linear_backward_engine(*above, fast_path) != LinearEngine::CublasLt)
      continue;
    pairs.push_back(ReluPair{f->second, j, i, relu_mask_ld(fwd.out), relu_mask_bytes(fwd.out, fwd.rows)});
  }
  return pairs;
}

const FusedProduct *EpiloguePlan::find(size_t op, ProductKind kind) const {
  for (const FusedProduct &p : products)
    if (p.op == op && p.product == kind) return &p;
  return nullptr;
}

EpiloguePlan plan_epilogues(const std::vector<StepOp> &ops, uint32_t fast_path, const std::vector<ReluPair> &pairs,
                            const std::function<bool(const FusedProduct &)> &try_fuse) {
  EpiloguePlan plan;
  plan.used.assign(pairs.size(), false);
  plan.act_done.assign(ops.size(), false);
  std::vector<FusedProduct> fused;  // unordered for now
  std::vector<bool> paired_forward(ops.size(), false), paired_above(ops.size(), false);
  for (size_t k = 0; k < pairs.size(); ++k) {
    const ReluPair &pr = pairs[k];
    // A forward or an upper dx product can serve one pair only.
    if (paired_forward[pr.forward] || paired_above[pr.above]) continue;
    const auto &fwd = std::get<LinearOp>(ops[pr.forward]);
    const auto &below = std::get<LinearBackwardOp>(ops[pr.below]);
    const FusedProduct keep{pr.forward, ProductKind::Forward,
                            fwd.b ? EpilogueKind::ReluAuxBias : EpilogueKind::ReluAux, int(k)};
    const FusedProduct grad{pr.above, ProductKind::InputGrad,
                            below.db ? EpilogueKind::DReluBgrad : EpilogueKind::DRelu, int(k)};
    if (!try_fuse(keep) || !try_fuse(grad)) continue;
    plan.used[k] = true;
    paired_forward[pr.forward] = paired_above[pr.above] = true;
    plan.act_done[pr.below] = true;
    fused.push_back(keep);
    fused.push_back(grad);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (auto *f = std::get_if<LinearOp>(&ops[i])) {
      if (paired_forward[i] || choose_linear_engine(*f, fast_path) != LinearEngine::CublasLt) continue;
      const FusedProduct p{i, ProductKind::Forward,
                           f->act == UnaryOp::Relu ? (f->b ? EpilogueKind::ReluBias : EpilogueKind::Relu)
                                                   : EpilogueKind::Bias};
      if (try_fuse(p)) fused.push_back(p);
    } else if (auto *b = std::get_if<LinearBackwardOp>(&ops[i])) {
      if (!b->db || plan.act_done[i] || choose_linear_backward_engine(*b, fast_path) != LinearEngine::CublasLt)
        continue;
      const FusedProduct p{i, ProductKind::WeightGrad, EpilogueKind::BgradB};
      if (try_fuse(p)) fused.push_back(p);
    }
  }
  // In op order, forward before weight before input products of an op.
  for (size_t i = 0; i < ops.size(); ++i)
    for (ProductKind kind : {ProductKind::Forward, ProductKind::WeightGrad, ProductKind::InputGrad})
      for (const FusedProduct &p : fused)
        if (p.op == i && p.product == kind) plan.products.push_back(p);
  return plan;
}

}  // namespace kiln::cuda
