#include "train/step_builder.hpp"

#include <tuple>
#include <vector>

#include "nn/loss.hpp"
#include "train/gradient_reduce.hpp"

namespace kiln {

namespace {

CastOp cast_op(DType from, DType to, int64_t n, const void *in, void *out) {
  CastOp op;
  op.args.from = from, op.args.to = to;
  op.args.n = n;
  op.args.in = in, op.args.out = out;
  return op;
}

GatherOp gather_op(const SourceView &s, const StepBuffers &buf, int64_t rows, DType work) {
  GatherOp op;
  GatherArgs &g = op.args;
  g.order = buf.rows;
  g.count = rows;
  g.x_type = s.x_type, g.x = s.x, g.cols = s.cols;
  g.scale = s.scale, g.shift = s.shift;
  g.out_x_type = work, g.out_x = buf.batch_x;
  g.y_type = s.y_type, g.y = s.y, g.y_cols = s.y_cols;
  g.out_y_type = buf.batch_y_type, g.out_y = buf.batch_y;
  return op;
}

}  // namespace

StepProgram build_step_program(const StepBuild &b) {
  const Model &m = *b.model;
  const StepConfig &c = *b.config;
  const StepBuffers &buf = *b.buffers;
  const Workspace &ws = *buf.ws;
  const int64_t rows = b.rows, out = m.output_size();
  StepProgram p;
  p.rows = rows;
  p.trains = b.trains;
  p.table = buf.table;
  p.table_size = buf.table_size;
  p.fast_path = c.fast_path;
  // A communicator of one rank averages nothing: its step is the one without
  // a communicator (which the CPU's fast path can fold plain SGD into; a step
  // whose gradients are averaged over ranks it cannot).
  Collective *const comm = b.comm && b.comm->size() > 1 ? b.comm : nullptr;
  // A training step with a communicator waits for its allreduces on the
  // host: it must not be captured in a CUDA graph (core/program.hpp).
  if (comm && b.trains) p.fast_path &= ~uint32_t(kFastGraphs);
  p.label = std::string(b.trains ? "train " : "evaluate ") + m.description() + " rows " + std::to_string(rows) + " " +
            c.precision;
  p.log = [ctx = m.context()](kiln_log_level level, const std::string &message) { ctx->log(level, message); };
  const bool mixed = c.work != m.dtype();
  const void *params = m.flat().data();
  if (mixed) {
    p.ops.push_back(cast_op(m.dtype(), c.work, m.flat().numel(), params, buf.lp_params));
    params = buf.lp_params;
  }
  if (b.source) p.ops.push_back(gather_op(*b.source, buf, rows, c.work));
  std::vector<const void *> acts;
  const void *logits = m.append_forward(p.ops, ws, buf.batch_x, params, c.math, rows, b.training, &acts);
  void *dlogits = b.trains ? ws.grad.back().data() : nullptr;
  double *stats = stats_field(buf.stats, b.source ? offsetof(StepStats, pass) : offsetof(StepStats, step));
  if (mixed) {  // the loss in f32, from and to the bf16 activations
    p.ops.push_back(cast_op(c.work, m.dtype(), rows * out, logits, buf.logits32));
    p.ops.push_back(loss_op(c.loss, m.dtype(), rows, out, buf.logits32, buf.batch_y, b.trains ? buf.dlogits32 : nullptr,
                            stats, c.label_smoothing));
    if (b.trains) p.ops.push_back(cast_op(m.dtype(), c.work, rows * out, buf.dlogits32, dlogits));
  } else {
    p.ops.push_back(loss_op(c.loss, m.dtype(), rows, out, logits, buf.batch_y, dlogits, stats, c.label_smoothing));
  }
  if (!b.trains) return p;

  const int64_t n = m.flat().numel();
  const size_t backward_begin = p.ops.size();
  m.append_backward(p.ops, ws, acts, params, mixed ? buf.lp_grads : buf.grads, c.math, rows, b.training);
  // Before clipping: every rank clips and updates with the same mean gradient.
  GradientBuffers g;
  g.t = m.dtype(), g.grads = buf.grads, g.n = n;
  g.work = c.work, g.work_grads = mixed ? buf.lp_grads : buf.grads;
  const int64_t buckets = finish_gradients(p.ops, backward_begin, g, comm, c.bucket_bytes);
  if (buckets > 0) p.label += ", " + std::to_string(buckets) + " allreduce bucket" + (buckets > 1 ? "s" : "");
  if (c.grad_clip > 0) {
    ClipOp clip;
    clip.args.t = m.dtype();
    clip.args.n = n;
    clip.args.grads = buf.grads;
    clip.args.max_norm = c.grad_clip;
    clip.args.scratch = stats_field(buf.stats, offsetof(StepStats, clip_scratch));
    p.ops.push_back(clip);
  }
  p.ops.push_back(b.optimizer->update_op(m.flat(), buf.grads));
  p.writes.push_back(m.flat());
  return p;
}

StepKey step_key(const StepBuild &b) {
  StepKey k;
  k.trains = b.trains, k.training = b.training;
  k.rows = b.rows;
  k.has_source = b.source != nullptr;
  if (b.source) k.source = *b.source;
  k.buffers = b.buffers->generation;
  k.params = b.model->flat().data();
  k.comm = b.comm;
  return k;
}

bool StepKey::operator==(const StepKey &o) const {
  const auto source_fields = [](const SourceView &s) {
    return std::tie(s.data, s.x, s.y, s.x_type, s.y_type, s.scale, s.shift, s.cols, s.y_cols);
  };
  return std::tie(trains, training, rows, has_source, buffers, params, comm) ==
             std::tie(o.trains, o.training, o.rows, o.has_source, o.buffers, o.params, o.comm) &&
         source_fields(source) == source_fields(o.source);
}

}  // namespace kiln
