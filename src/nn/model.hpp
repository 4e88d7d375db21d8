// Model: a sequential MLP whose parameters live in ONE flat device buffer
// (weights [out, in] and biases [out] of each Linear, in layer order, each
// starting at a 16-element boundary so device kernels see aligned rows). The
// trainer keeps gradients and optimizer state in buffers of the same layout,
// so clipping and every optimizer update are single kernels over everything.
//
// The spec is compiled into stages: a Linear and the activation right after
// it run as one gemm plus one fused bias+activation kernel; a lone activation
// and a Dropout are stages of their own; a Dropout with p = 0 is no stage.
//
// An output transform (Softmax, LogSoftmax: the spec's last layer) is no
// stage: the stages compute the logits, which the trainer trains with the
// cross-entropy loss (it takes logits, and is then PyTorch's NLLLoss over
// the log-softmax); forward() and predict(LOGITS) apply the transform to
// them, predict(PROBABILITIES) and predict(CLASSES) read the logits.
// A model without a Linear (spec input(N)) has no parameters: its flat
// buffer is empty.
//
// Two forward paths:
//  - predict() and forward(): inference, const and safe from several
//    threads (nn/model_inference.cpp): each Linear's weights packed once per
//    version of the parameters (Backend::pack_linear), the products with
//    bias and activation fused and their thread count chosen per product
//    (Backend::linear_packed), intermediate buffers reused from call to
//    call, so a call allocates its result and nothing else after the first
//    at that batch size. forward() follows the training flag, as calling a
//    PyTorch module does: in training mode a model with Dropout runs the
//    plain path, with buffers allocated per call and its own masks;
//  - append_forward()/append_backward(): the trainer's, which add the
//    model's ops to a step program over a Workspace sized once per batch
//    size, so a training step allocates nothing.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/program.hpp"
#include "core/tensor.hpp"
#include "nn/spec.hpp"

namespace kiln {

struct Stage {
  enum Kind { kLinear, kActivation, kDropout } kind = kLinear;
  int64_t in = 0, out = 0;        // features entering and leaving the stage
  int64_t weight = -1, bias = -1;  // element offsets in the flat buffer (-1: none)
  UnaryOp act = UnaryOp::Identity;  // a Linear's fused activation, or the lone one
  double alpha = 0, threshold = 0;  // act's parameters (core/backend.hpp's UnaryOp)
  double p = 0;                   // Dropout probability
  bool keep_pre = false;          // a fused activation whose backward needs x W^T + b
};

struct ParameterInfo {
  std::string name;  // "0.weight", as nn.Sequential's state_dict
  Shape shape;
  int64_t offset = 0;  // elements into the flat buffer
  int64_t fan_in = 0;  // the Linear's in_features: sets the init bound
};

// The trainer's per-batch-size buffers (Model::make_workspace), in the
// dtype the step computes in (the model's, or bf16 for mixed precision).
struct Workspace {
  int64_t capacity = 0;       // rows
  DType dtype = DType::F32;
  std::vector<Tensor> out;    // per stage: its output [capacity, out]
  std::vector<Tensor> grad;   // per stage: the loss gradient w.r.t. its output
  std::vector<Tensor> pre;    // per stage: pre-activations (keep_pre only)
  std::vector<Tensor> mask;   // per stage: dropout masks (Dropout only)
};

class Model {
 public:
  // INVALID_ARGUMENT for a spec without a Linear or a dtype other than f32/f64;
  // NOT_SUPPORTED for f64 on CUDA; DEVICE_UNAVAILABLE; OUT_OF_MEMORY.
  static std::shared_ptr<Model> create(const std::shared_ptr<Context> &ctx, const ModelSpec &spec, Device device,
                                       DType dtype);
  // The parameters (names, shapes) a model of spec has, worked out without
  // allocating them: lets a loader check a file before trusting its sizes.
  static std::vector<ParameterInfo> parameters_of(const std::shared_ptr<Context> &ctx, const ModelSpec &spec);

  const ModelSpec &spec() const { return spec_; }
  const std::string &description() const { return description_; }
  const std::shared_ptr<Context> &context() const { return ctx_; }
  Device device() const { return params_.device(); }
  DType dtype() const { return params_.dtype(); }
  int64_t input_size() const { return spec_.input_size(); }
  int64_t output_size() const { return spec_.output_size(); }
  // KILN_LAYER_SOFTMAX or KILN_LAYER_LOG_SOFTMAX, or KILN_LAYER_LINEAR for
  // a model without an output transform.
  kiln_layer_kind output_transform() const { return transform_; }
  // Moves the parameters. Views taken before keep the old storage.
  void to(Device device);
  ~Model();

  bool training() const { return training_.load(); }
  void set_training(bool training) { training_.store(training); }

  // Scalars in weights and biases (the flat buffer also holds alignment gaps).
  int64_t num_parameters() const { return num_parameters_; }
  const std::vector<ParameterInfo> &parameters() const { return parameters_; }
  // Parameter i as a view of the flat buffer.
  Tensor parameter(size_t i) const;
  // The flat buffer [flat_size]; its gaps are always zero.
  const Tensor &flat() const { return params_; }

  // x [batch, input_size] (or [batch, ...] with that many features per row)
  // of any float dtype or u8 on the model's device -> logits [batch,
  // outputs], through the output transform when there is one.
  Tensor forward(const Tensor &x) const;
  // forward in evaluation mode; x may be on any device.
  Tensor predict(const Tensor &x, kiln_predict_kind kind) const;

  // Training path: the model's part of a step program (core/program.hpp).
  // The workspace holds every activation for `capacity` rows in dtype t.
  Workspace make_workspace(int64_t capacity, DType t) const;
  // Appends the forward ops over rows [0, rows) of x ([>= rows,
  // input_size] in ws.dtype) with the parameters at `params` (the flat
  // layout, in ws.dtype); returns the logits' pointer ([rows, outputs]).
  // Dropout only when training. *acts receives the input of every stage and
  // the output, for append_backward.
  const void *append_forward(std::vector<StepOp> &ops, const Workspace &ws, const void *x, const void *params,
                             MathMode math, int64_t rows, bool training, std::vector<const void *> *acts) const;
  // Appends the backward: from the loss gradient w.r.t. the logits in
  // ws.grad.back() to the parameter gradients in `grads` (flat layout, in
  // ws.dtype; every entry overwritten, gaps untouched).
  void append_backward(std::vector<StepOp> &ops, const Workspace &ws, const std::vector<const void *> &acts,
                       const void *params, void *grads, MathMode math, int64_t rows, bool training) const;

 private:
  // What the inference path keeps between calls (nn/model_inference.cpp).
  // Packed weights are valid for one storage of the parameters at one
  // version (Storage::version); a storage that others may be writing now
  // (foreign_writes) gets `direct` ones, which read the weights in place.
  struct PackedWeights {
    Tensor params;  // the storage they were made from (kept, so it is never another's)
    uint64_t version = 0;
    std::vector<std::unique_ptr<PackedLinear>> layers;  // per stage; null but for Linear
  };
  // Every stage's output for up to `capacity` rows, and the input in the
  // model's dtype; one set per concurrent call.
  struct InferenceBuffers {
    int64_t capacity = 0;
    std::vector<Tensor> out;
    Tensor input;
  };
  struct InferenceCache {
    std::mutex mutex;
    std::shared_ptr<const PackedWeights> packed, direct;
    std::vector<std::unique_ptr<InferenceBuffers>> idle;
  };

  Model(std::shared_ptr<Context> ctx, const ModelSpec &spec);
  void initialise(DType dtype, Device device);
  // INVALID_ARGUMENT / SHAPE_MISMATCH / DTYPE_MISMATCH unless x is a float
  // or u8 [batch, input_size] (or [batch, ...]) tensor on `device`.
  void check_input(const Tensor &x, Device device) const;
  // The inference path: x on the model's device, in evaluation mode.
  Tensor infer(const Tensor &x, kiln_predict_kind kind) const;
  std::shared_ptr<const PackedWeights> packed_weights(const Tensor &params) const;
  std::unique_ptr<InferenceBuffers> take_buffers(int64_t rows, DType t, DType input_dtype) const;
  void give_back(std::unique_ptr<InferenceBuffers> buffers) const;
  // The plain forward pass with Dropout (training mode), allocating per call.
  Tensor run_with_dropout(const Tensor &x) const;

  std::shared_ptr<Context> ctx_;
  ModelSpec spec_;
  std::string description_;
  std::vector<Stage> stages_;
  size_t first_trained_stage_ = 0;  // backward stops after this stage
  std::vector<ParameterInfo> parameters_;
  int64_t num_parameters_ = 0;
  int64_t flat_size_ = 0;
  Tensor params_;
  std::atomic<bool> training_{true};
  bool has_dropout_ = false;  // a Dropout stage (p > 0)
  kiln_layer_kind transform_ = KILN_LAYER_LINEAR;  // output_transform()
  mutable InferenceCache inference_;
};

// Model files (nn/model_file.cpp): safetensors with the parameter names and
// metadata {"format": "kiln-model", "kiln.spec", "kiln.version"}. A
// state_dict without that metadata is FORMAT saying which spec fits it.
void save_model(const Model &model, const std::string &path);
std::shared_ptr<Model> load_model(const std::shared_ptr<Context> &ctx, const std::string &path, Device device);
// A model of spec from any file io::open_tensor_file reads (safetensors, a
// torch.save zip) holding exactly its parameters under nn.Sequential's names
// (a PyTorch state_dict, or a kiln model file); metadata is ignored.
// SHAPE_MISMATCH for a missing, extra or misshapen tensor (the message then
// describes the file's layers: nn/state_dict_hint.hpp) and DTYPE_MISMATCH
// for a dtype other than f32 or f64 or mixed dtypes, each naming the tensor;
// FORMAT / IO from the reader.
std::shared_ptr<Model> load_model_with_spec(const std::shared_ptr<Context> &ctx, const std::string &path,
                                            const ModelSpec &spec, Device device);
// Checks every name, dtype and shape of the file (any format
// io::open_tensor_file reads) against the model before changing anything
// (SHAPE_MISMATCH / DTYPE_MISMATCH naming the parameter).
void load_weights(Model &model, const std::string &path);

}  // namespace kiln
