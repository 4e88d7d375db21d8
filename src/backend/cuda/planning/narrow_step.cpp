#include "backend/cuda/planning/narrow_step.hpp"

namespace kiln::cuda {

std::optional<NarrowStep> find_narrow_step(const std::vector<StepOp> &ops, uint32_t fast_path) {
  if (!(fast_path & kFastNarrow)) return std::nullopt;
  size_t linears = 0, first = ops.size();
  for (size_t i = 0; i < ops.size(); ++i)
    if (std::holds_alternative<LinearOp>(ops[i]) || std::holds_alternative<LinearBackwardOp>(ops[i])) {
      if (first == ops.size()) first = i;
      ++linears;
    }
  if (linears != 4 || first + 5 > ops.size()) return std::nullopt;
  const auto *hidden = std::get_if<LinearOp>(&ops[first]);
  const auto *output = std::get_if<LinearOp>(&ops[first + 1]);
  const auto *loss = std::get_if<LossOp>(&ops[first + 2]);
  const auto *output_back = std::get_if<LinearBackwardOp>(&ops[first + 3]);
  const auto *hidden_back = std::get_if<LinearBackwardOp>(&ops[first + 4]);
  if (!hidden || !output || !loss || !output_back || !hidden_back) return std::nullopt;

  const int64_t rows = hidden->rows, in = hidden->in, units = hidden->out, classes = output->out;
  const bool f32 = hidden->t == DType::F32 && output->t == DType::F32 && loss->args.t == DType::F32 &&
                   output_back->t == DType::F32 && hidden_back->t == DType::F32;
  // The kernels multiply in f32 FMAs: a step asked for in TF32 keeps the
  // tensor cores' products, so that it matches its plain kernels.
  const bool exact = hidden->math == MathMode::Exact && output->math == MathMode::Exact &&
                     output_back->math == MathMode::Exact && hidden_back->math == MathMode::Exact;
  const bool shapes = rows > 0 && in > 0 && units > 0 && units <= kNarrowMaxHidden && classes > 0 &&
                      classes <= kNarrowMaxClasses && output->rows == rows && output->in == units &&
                      loss->args.rows == rows && loss->args.cols == classes && output_back->rows == rows &&
                      output_back->in == units && output_back->out == classes && hidden_back->rows == rows &&
                      hidden_back->in == in && hidden_back->out == units;
  const bool acts = (hidden->act == UnaryOp::Relu || hidden->act == UnaryOp::Identity) && !hidden->pre &&
                    output->act == UnaryOp::Identity && !output->pre && hidden_back->act == hidden->act &&
                    hidden_back->alpha == hidden->alpha && hidden_back->threshold == hidden->threshold &&
                    !hidden_back->pre && output_back->act == UnaryOp::Identity;
  // Each op reads what the one before it wrote, as the model's layers chain them.
  const bool chained = output->x == hidden->y && loss->kind == KILN_LOSS_CROSS_ENTROPY &&
                       loss->args.pred == output->y && loss->args.dpred && output_back->dy == loss->args.dpred &&
                       output_back->x == hidden->y && output_back->w == output->w && output_back->dx &&
                       output_back->dw && hidden_back->dy == output_back->dx && hidden_back->x == hidden->x &&
                       hidden_back->w == hidden->w && hidden_back->y == hidden->y && !hidden_back->dx &&
                       hidden_back->dw && (output_back->db != nullptr) == (output->b != nullptr) &&
                       (hidden_back->db != nullptr) == (hidden->b != nullptr);
  if (!f32 || !exact || !shapes || !acts || !chained) return std::nullopt;

  NarrowStep s;
  s.first = first, s.last = first + 4;
  s.rows = rows, s.in = in, s.hidden = units, s.classes = classes;
  s.x = static_cast<const float *>(hidden->x);
  s.w1 = static_cast<const float *>(hidden->w), s.b1 = static_cast<const float *>(hidden->b);
  s.h = static_cast<float *>(hidden->y);
  s.act = hidden->act, s.alpha = hidden->alpha, s.threshold = hidden->threshold;
  s.w2 = static_cast<const float *>(output->w), s.b2 = static_cast<const float *>(output->b);
  s.logits = static_cast<float *>(output->y);
  s.labels = static_cast<const int64_t *>(loss->args.target);
  s.grad_scale = loss->args.grad_scale, s.smoothing = loss->args.label_smoothing;
  s.dlogits = static_cast<float *>(loss->args.dpred);
  s.stats = loss->args.stats;
  s.dh = static_cast<float *>(output_back->dx);
  s.dw1 = static_cast<float *>(hidden_back->dw), s.db1 = static_cast<float *>(hidden_back->db);
  s.dw2 = static_cast<float *>(output_back->dw), s.db2 = static_cast<float *>(output_back->db);
  return s;
}

}  // namespace kiln::cuda
