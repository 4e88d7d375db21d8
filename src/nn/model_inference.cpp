// The inference path of Model (predict, and forward outside training with
// Dropout): see nn/model.hpp.
//
// Why it keeps state: a product with weights packed per call spends as long
// packing as multiplying for a batch of a few rows, and a call that
// allocates its intermediate activations pays the allocator (and, for big
// batches, page faults) every time. So each Linear's weights are packed once
// per version of the parameters' storage (core/tensor.hpp: every write kiln
// makes bumps it, and a storage others may be writing is never packed), and
// the activations live in buffers that calls take and give back. A call
// then allocates only its result.
#include <utility>

#include "nn/model.hpp"

namespace kiln {

Model::~Model() = default;

std::shared_ptr<const Model::PackedWeights> Model::packed_weights(const Tensor &params) const {
  // Read before packing: a write during the packing leaves this older
  // version in the key, so the next call packs again.
  const uint64_t version = params.version();
  const bool foreign = params.foreign_writes();
  std::lock_guard<std::mutex> lock(inference_.mutex);
  std::shared_ptr<const PackedWeights> &slot = foreign ? inference_.direct : inference_.packed;
  if (slot && slot->params.shares_storage(params) && (foreign || slot->version == version)) return slot;
  auto fresh = std::make_shared<PackedWeights>();
  fresh->params = params;
  fresh->version = version;
  Backend &b = params.backend();
  const DType t = params.dtype();
  const size_t esize = size_t(dtype_size(t));
  const char *base = static_cast<const char *>(params.data());
  for (const Stage &s : stages_) {
    std::unique_ptr<PackedLinear> layer;
    if (s.kind == Stage::kLinear) {
      const void *w = base + s.weight * esize;
      layer = foreign ? std::make_unique<PackedLinear>(t, s.out, s.in, w)
                      : b.pack_linear(params.device().index, t, w, s.out, s.in);
    }
    fresh->layers.push_back(std::move(layer));
  }
  slot = std::move(fresh);  // an older set goes when the last call using it ends
  return slot;
}

std::unique_ptr<Model::InferenceBuffers> Model::take_buffers(int64_t rows, DType t, DType input_dtype) const {
  std::unique_ptr<InferenceBuffers> buffers;
  {
    std::lock_guard<std::mutex> lock(inference_.mutex);
    if (!inference_.idle.empty()) {
      buffers = std::move(inference_.idle.back());
      inference_.idle.pop_back();
    }
  }
  if (!buffers) buffers = std::make_unique<InferenceBuffers>();
  if (buffers->capacity < rows) {
    buffers->out.clear();
    buffers->input = Tensor();
    for (const Stage &s : stages_)
      buffers->out.push_back(s.kind == Stage::kDropout ? Tensor() : Tensor::empty(ctx_, Shape{rows, s.out}, t, device()));
    buffers->capacity = rows;
  }
  if (input_dtype != t && !buffers->input.defined())
    buffers->input = Tensor::empty(ctx_, Shape{buffers->capacity, input_size()}, t, device());
  return buffers;
}

void Model::give_back(std::unique_ptr<InferenceBuffers> buffers) const {
  try {
    std::lock_guard<std::mutex> lock(inference_.mutex);
    inference_.idle.push_back(std::move(buffers));
  } catch (...) {
    // No room to keep them: they are freed, and a later call makes new ones.
  }
}

Tensor Model::infer(const Tensor &x, kiln_predict_kind kind) const {
  const Tensor params = params_;  // one consistent snapshot for the whole call
  check_input(x, params.device());
  const int64_t rows = x.dim(0), outputs = output_size();
  const DType t = params.dtype();
  Tensor result = kind == KILN_PREDICT_CLASSES ? Tensor::empty(ctx_, Shape{rows}, DType::I64, params.device())
                                               : Tensor::empty(ctx_, Shape{rows, outputs}, t, params.device());
  if (rows == 0) return result;

  const std::shared_ptr<const PackedWeights> packed = packed_weights(params);
  struct Borrowed {
    const Model &model;
    std::unique_ptr<InferenceBuffers> buffers;
    ~Borrowed() { model.give_back(std::move(buffers)); }
  } borrowed{*this, take_buffers(rows, t, x.dtype())};
  InferenceBuffers &buffers = *borrowed.buffers;

  Backend &b = params.backend();
  const int64_t dev = params.device().index;
  const char *base = static_cast<const char *>(params.data());
  const size_t esize = size_t(dtype_size(t));
  const void *in = x.data();
  if (x.dtype() != t) {
    CastArgs cast;
    cast.from = x.dtype(), cast.to = t;
    cast.n = rows * input_size();
    cast.in = x.data(), cast.out = buffers.input.data();
    b.cast(dev, cast);
    in = buffers.input.data();
  }
  size_t last = stages_.size();  // stages past the last that runs: trailing Dropouts
  while (last > 0 && stages_[last - 1].kind == Stage::kDropout) --last;
  // The logits go straight into the result when they are what was asked for.
  const bool logits_out = kind == KILN_PREDICT_LOGITS && transform_ == KILN_LAYER_LINEAR;
  for (size_t si = 0; si < last; ++si) {
    const Stage &s = stages_[si];
    if (s.kind == Stage::kDropout) continue;  // the identity in evaluation mode
    void *y = si + 1 == last && logits_out ? result.data() : buffers.out[si].data();
    if (s.kind == Stage::kLinear) {
      PackedLinearArgs args;
      args.rows = rows;
      args.x = in;
      args.w = packed->layers[si].get();
      args.bias = s.bias >= 0 ? base + s.bias * esize : nullptr;
      args.y = y;
      args.act = s.act, args.alpha = s.alpha, args.threshold = s.threshold;
      b.linear_packed(dev, args);
    } else {
      UnaryArgs args;
      args.op = s.act, args.t = t;
      args.n = rows * s.out;
      args.in = in, args.out = y;
      args.alpha = s.alpha, args.threshold = s.threshold;
      b.unary(dev, args);
    }
    in = y;
  }
  if (logits_out) {
    if (in != result.data()) {  // no stage ran: a model of its input alone
      CastArgs copy;
      copy.from = copy.to = t;
      copy.n = rows * outputs;
      copy.in = in, copy.out = result.data();
      b.cast(dev, copy);
    }
  } else if (kind == KILN_PREDICT_PROBABILITIES || kind == KILN_PREDICT_LOGITS) {
    // The softmax of the logits, or the output transform.
    SoftmaxArgs args;
    args.t = t;
    args.outer = rows, args.n = outputs, args.inner = 1;
    args.in = in, args.out = result.data();
    args.log = kind == KILN_PREDICT_LOGITS && transform_ == KILN_LAYER_LOG_SOFTMAX;
    b.softmax(dev, args);
  } else if (kind == KILN_PREDICT_CLASSES) {
    ReduceArgs args;
    args.op = ReduceOp::Argmax, args.t = t;
    args.outer = rows, args.n = outputs, args.inner = 1;
    args.in = in, args.out = result.data();
    b.reduce(dev, args);
  }
  return result;
}

}  // namespace kiln
