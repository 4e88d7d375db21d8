#include "nn/model.hpp"

#include <cmath>
#include <vector>

#include "core/ops.hpp"
#include "core/rng.hpp"

namespace kiln {

namespace {

constexpr int64_t kAlign = 16;  // elements: 64-byte rows for f32 parameters

int64_t align_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

UnaryOp unary_of(kiln_layer_kind kind) {
  switch (kind) {
    case KILN_LAYER_RELU: return UnaryOp::Relu;
    case KILN_LAYER_LEAKY_RELU: return UnaryOp::LeakyRelu;
    case KILN_LAYER_GELU: return UnaryOp::Gelu;
    case KILN_LAYER_TANH: return UnaryOp::Tanh;
    case KILN_LAYER_SIGMOID: return UnaryOp::Sigmoid;
    case KILN_LAYER_ELU: return UnaryOp::Elu;
    case KILN_LAYER_SELU: return UnaryOp::Selu;
    case KILN_LAYER_SOFTPLUS: return UnaryOp::Softplus;
    default: return UnaryOp::Identity;
  }
}

// The dropout masks of one call: stage s draws from its own stream.
uint64_t stage_seed(uint64_t seed, size_t stage) { return rng_bits(seed, stage); }

// The forward op of stage s over rows rows of x, writing y (and pre, mask).
StepOp stage_forward(const Stage &s, DType t, MathMode math, int64_t rows, const void *x, const char *params,
                     size_t esize, void *y, void *pre, uint8_t *mask) {
  switch (s.kind) {
    case Stage::kLinear: {
      LinearOp op;
      op.t = t;
      op.math = math;
      op.rows = rows, op.in = s.in, op.out = s.out;
      op.x = x;
      op.w = params + s.weight * esize;
      op.b = s.bias >= 0 ? params + s.bias * esize : nullptr;
      op.y = y;
      op.pre = pre;
      op.act = s.act;
      op.alpha = s.alpha;
      op.threshold = s.threshold;
      return op;
    }
    case Stage::kActivation: {
      ActivationOp op;
      op.args.op = s.act;
      op.args.t = t;
      op.args.n = rows * s.out;
      op.args.alpha = s.alpha;
      op.args.threshold = s.threshold;
      op.args.in = x;
      op.args.out = y;
      return op;
    }
    case Stage::kDropout:
      break;
  }
  DropoutOp op;
  op.args.t = t;
  op.args.n = rows * s.out;
  op.args.x = x;
  op.args.y = y;
  op.args.mask = mask;
  op.args.p = s.p;
  return op;
}

void check_dtype_device(DType dtype, Device device) {
  check(dtype == DType::F32 || dtype == DType::F64, KILN_ERROR_INVALID_ARGUMENT,
        std::string("model parameters must be f32 or f64, got ") + dtype_name(dtype));
  check(dtype == DType::F32 || device.is_cpu(), KILN_ERROR_NOT_SUPPORTED,
        "f64 models run on the CPU only, not on " + device.str());
}

}  // namespace

Model::Model(std::shared_ptr<Context> ctx, const ModelSpec &spec)
    : ctx_(std::move(ctx)), spec_(spec), description_(spec.describe()) {
  const std::vector<LayerSpec> &layers = spec_.layers();
  int64_t features = spec_.input_size();
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec &l = layers[i];
    Stage s;
    s.in = features;
    if (l.kind == KILN_LAYER_LINEAR) {
      s.kind = Stage::kLinear;
      s.out = l.out;
      s.weight = flat_size_;
      const std::string index = std::to_string(spec_.module_index(i));  // nn.Sequential's, Flattens counted
      parameters_.push_back(ParameterInfo{index + ".weight", Shape{l.out, l.in}, flat_size_, l.in});
      flat_size_ = align_up(flat_size_ + l.out * l.in);
      if (l.bias) {
        s.bias = flat_size_;
        parameters_.push_back(ParameterInfo{index + ".bias", Shape{l.out}, flat_size_, l.in});
        flat_size_ = align_up(flat_size_ + l.out);
      }
      num_parameters_ += l.out * l.in + (l.bias ? l.out : 0);
      if (i + 1 < layers.size() && is_activation(layers[i + 1].kind)) {  // fuse it
        s.act = unary_of(layers[i + 1].kind);
        s.alpha = layers[i + 1].arg;
        s.threshold = layers[i + 1].arg2;
        s.keep_pre = act_grad_reads_pre(s.act);
        ++i;
      }
    } else if (is_output_transform(l.kind)) {
      transform_ = l.kind;  // the last layer (ModelSpec): applied after the stages
      continue;
    } else if (l.kind == KILN_LAYER_DROPOUT) {
      if (l.arg == 0) continue;  // the identity
      s.kind = Stage::kDropout;
      s.out = features;
      s.p = l.arg;
      has_dropout_ = true;
    } else {
      s.kind = Stage::kActivation;
      s.out = features;
      s.act = unary_of(l.kind);
      s.alpha = l.arg;
      s.threshold = l.arg2;
    }
    features = s.out;
    stages_.push_back(s);
  }
  for (size_t s = 0; s < stages_.size(); ++s)
    if (stages_[s].kind == Stage::kLinear) {
      first_trained_stage_ = s;
      break;
    }
}

std::shared_ptr<Model> Model::create(const std::shared_ptr<Context> &ctx, const ModelSpec &spec, Device device,
                                     DType dtype) {
  spec.validate();
  check_dtype_device(dtype, device);
  ctx->validate(device);
  std::shared_ptr<Model> model(new Model(ctx, spec));
  model->initialise(dtype, device);
  return model;
}

std::vector<ParameterInfo> Model::parameters_of(const std::shared_ptr<Context> &ctx, const ModelSpec &spec) {
  spec.validate();
  return Model(ctx, spec).parameters_;
}

// nn.Linear.reset_parameters: kaiming_uniform_(a = sqrt(5)) gives the weight
// bound gain * sqrt(3 / fan_in) with gain = sqrt(2 / (1 + 5)), i.e.
// 1 / sqrt(fan_in); the bias uses the same bound. Drawn weight then bias,
// layer by layer, on the host in double, then one copy to the device.
void Model::initialise(DType dtype, Device device) {
  std::vector<double> host(size_t(flat_size_), 0.0);
  const uint64_t seed = ctx_->seed();
  for (const ParameterInfo &p : parameters_) {
    const double bound = 1.0 / std::sqrt(double(p.fan_in));
    const int64_t n = p.shape.numel();
    const uint64_t first = ctx_->reserve_random(uint64_t(n));
    for (int64_t i = 0; i < n; ++i) host[size_t(p.offset + i)] = bound * (2.0 * rng_uniform(seed, first + i) - 1.0);
  }
  Tensor staged = Tensor::from_host(ctx_, host.data(), int64_t(host.size() * sizeof(double)), Shape{flat_size_},
                                    DType::F64, Device::cpu());
  params_ = cast(staged, dtype).to(device);
}

void Model::to(Device device) {
  check_dtype_device(dtype(), device);
  params_ = params_.to(device);
  std::lock_guard<std::mutex> lock(inference_.mutex);  // nothing kept for the old storage
  inference_.packed.reset();
  inference_.direct.reset();
  inference_.idle.clear();
}

Tensor Model::parameter(size_t i) const {
  const ParameterInfo &p = parameters_.at(i);
  return params_.rows(p.offset, p.offset + p.shape.numel()).reshape(p.shape);
}

Tensor Model::forward(const Tensor &x) const {
  return training() && has_dropout_ ? run_with_dropout(x) : infer(x, KILN_PREDICT_LOGITS);
}

void Model::check_input(const Tensor &x, Device device) const {
  // Messages are built only on failure: the inference path allocates
  // nothing when x is fine.
  if (x.device() != device)
    fail(KILN_ERROR_INVALID_ARGUMENT, "x is on " + x.device().str() + " but the model is on " + device.str());
  if (x.ndim() < 2 || x.numel() != x.dim(0) * input_size())
    fail(KILN_ERROR_SHAPE_MISMATCH,
         "x has shape " + x.shape().str() + " but the model takes [batch, " + std::to_string(input_size()) + "]");
  if (!dtype_is_float(x.dtype()) && x.dtype() != DType::U8)
    fail(KILN_ERROR_DTYPE_MISMATCH, std::string("x must be a float or u8 tensor, got ") + dtype_name(x.dtype()));
}

Tensor Model::run_with_dropout(const Tensor &x_in) const {
  const Tensor params = params_;  // one consistent snapshot for the whole call
  check_input(x_in, params.device());
  const int64_t rows = x_in.dim(0);
  x_in.wait_host_access();  // a pinned x still filling from a GPU (the CPU kernels read it directly)
  Tensor x = x_in.reshape(Shape{rows, input_size()});
  if (x.dtype() != params.dtype()) x = cast(x, params.dtype());

  const uint64_t seed = ctx_->derive_seed();
  Backend &b = params.backend();
  const int64_t dev = params.device().index;
  const DType t = params.dtype();
  const size_t esize = size_t(dtype_size(t));
  const char *base = static_cast<const char *>(params.data());
  for (size_t si = 0; si < stages_.size(); ++si) {
    const Stage &s = stages_[si];
    Tensor y = Tensor::empty(ctx_, Shape{rows, s.out}, t, params.device());
    Tensor mask;
    if (rows > 0) {
      if (s.kind == Stage::kDropout) mask = Tensor::empty(ctx_, Shape{rows, s.out}, DType::U8, params.device());
      StepOp op = stage_forward(s, t, MathMode::Exact, rows, x.data(), base, esize, y.data(), nullptr,
                                mask.defined() ? mask.data_as<uint8_t>() : nullptr);
      if (auto *d = std::get_if<DropoutOp>(&op)) d->args.stream = stage_seed(seed, si);
      run_op(b, dev, op, nullptr);
    }
    x = y;
  }
  if (transform_ != KILN_LAYER_LINEAR) x = softmax(x, 1, transform_ == KILN_LAYER_LOG_SOFTMAX);
  return x;
}

Tensor Model::predict(const Tensor &x, kiln_predict_kind kind) const {
  if (kind < KILN_PREDICT_LOGITS || kind > KILN_PREDICT_CLASSES)
    fail(KILN_ERROR_INVALID_ARGUMENT, "unknown predict kind " + std::to_string(int(kind)));
  // Evaluation mode without touching the flag other threads may read.
  return infer(x.device() == device() ? x : x.to(device()), kind);
}

Workspace Model::make_workspace(int64_t capacity, DType t) const {
  Workspace ws;
  ws.capacity = capacity;
  ws.dtype = t;
  // Zeroed, once: compiling a step program may read them before its first
  // step writes them (cuDNN's timing saves and restores each buffer it
  // touches, src/backend/cuda/planning/timing_guard.hpp).
  for (const Stage &s : stages_) {
    auto buffer = [&](DType type) { return Tensor::full(ctx_, Shape{capacity, s.out}, type, device(), 0.0); };
    ws.out.push_back(buffer(t));
    ws.grad.push_back(buffer(t));
    ws.pre.push_back(s.keep_pre ? buffer(t) : Tensor());
    ws.mask.push_back(s.kind == Stage::kDropout ? buffer(DType::U8) : Tensor());
  }
  return ws;
}

const void *Model::append_forward(std::vector<StepOp> &ops, const Workspace &ws, const void *x, const void *params,
                                  MathMode math, int64_t rows, bool training, std::vector<const void *> *acts) const {
  const DType t = ws.dtype;
  const size_t esize = size_t(dtype_size(t));
  const char *base = static_cast<const char *>(params);
  acts->assign(1, x);
  for (size_t si = 0; si < stages_.size(); ++si) {
    const Stage &s = stages_[si];
    const void *in = acts->back();
    if (s.kind == Stage::kDropout && !training) {
      acts->push_back(in);  // the identity: pass the input on
      continue;
    }
    ops.push_back(stage_forward(s, t, math, rows, in, base, esize, ws.out[si].data(),
                                s.keep_pre ? ws.pre[si].data() : nullptr,
                                s.kind == Stage::kDropout ? ws.mask[si].data_as<uint8_t>() : nullptr));
    if (auto *d = std::get_if<DropoutOp>(&ops.back())) d->args.stream = si;  // with the step's dropout seed
    acts->push_back(ws.out[si].data());
  }
  return acts->back();
}

void Model::append_backward(std::vector<StepOp> &ops, const Workspace &ws, const std::vector<const void *> &acts,
                            const void *params, void *grads, MathMode math, int64_t rows, bool training) const {
  const DType t = ws.dtype;
  const size_t esize = size_t(dtype_size(t));
  const char *base = static_cast<const char *>(params);
  char *gbase = static_cast<char *>(grads);
  void *g = ws.grad.back().data();  // d loss / d (output of stage si)
  for (size_t si = stages_.size(); si-- > first_trained_stage_;) {
    const Stage &s = stages_[si];
    const int64_t n = rows * s.out;
    switch (s.kind) {
      case Stage::kLinear: {
        LinearBackwardOp op;
        op.t = t;
        op.math = math;
        op.rows = rows, op.in = s.in, op.out = s.out;
        op.dy = g;
        op.x = acts[si];
        op.w = base + s.weight * esize;
        op.y = acts[si + 1];
        op.pre = s.keep_pre ? ws.pre[si].data() : nullptr;
        op.act = s.act;
        op.alpha = s.alpha;
        op.threshold = s.threshold;
        op.dw = gbase + s.weight * esize;
        op.db = s.bias >= 0 ? gbase + s.bias * esize : nullptr;
        op.dx = si > first_trained_stage_ ? ws.grad[si - 1].data() : nullptr;
        ops.push_back(op);
        if (op.dx) g = op.dx;
        break;
      }
      case Stage::kActivation: {
        ActivationBackwardOp op;  // in place
        op.args.t = t;
        op.args.n = n;
        op.args.act = s.act;
        op.args.alpha = s.alpha;
        op.args.threshold = s.threshold;
        op.args.dy = op.args.dx = g;
        op.args.pre = acts[si];
        op.args.y = acts[si + 1];
        ops.push_back(op);
        break;
      }
      case Stage::kDropout: {
        if (!training) break;  // the identity passes the gradient on
        DropoutBackwardOp op;
        op.args.t = t;
        op.args.n = n;
        op.args.p = s.p;
        op.args.dy = g;
        op.args.mask = ws.mask[si].data_as<uint8_t>();
        op.args.dx = ws.grad[si - 1].data();
        ops.push_back(op);
        g = op.args.dx;
        break;
      }
    }
  }
}

}  // namespace kiln
