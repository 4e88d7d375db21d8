// ModelSpec: the layer list of a sequential MLP, built layer by layer, from
// sizes, or parsed from text; and its text form (describe), which parse reads
// back, so a saved model can record its architecture in one string.
//
// Two text forms:
//  - compact, for the usual MLP: "784-256-10" (ReLU between Linears),
//    "784-256-10:gelu", "784-256-10:relu:dropout=0.2" (Dropout after each
//    hidden activation), activations relu, gelu, tanh, sigmoid, selu,
//    leaky_relu[=SLOPE], elu[=ALPHA], softplus[=BETA[,THRESHOLD]],
//    ":flatten" for an nn.Flatten() first and ":softmax" or ":log_softmax"
//    for an output transform last;
//  - a layer list, for everything else: "flatten;linear(784,32);relu;
//    dropout(0.2);linear(32,10,nobias);leaky_relu(0.1);sigmoid", and
//    "input(10);elu(2)" for a model without a Linear.
// describe() writes the compact form whenever it says the same thing.
//
// Softmax and LogSoftmax are output transforms: the last layer or nothing
// (nn/model.hpp says what a model does with one).
//
// Flatten is PyTorch's nn.Flatten(): it holds nothing and does nothing to
// the [batch, features] rows kiln computes on (a model takes [batch, ...]
// inputs of its input size per row anyway), but it takes an index in
// nn.Sequential, so it shifts the state_dict names of the layers after it
// (Flatten, Linear, ReLU, Linear -> "1.weight", "3.weight"). It is kept as
// those indices, not as a layer: layers() lists the layers that compute.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln {

struct LayerSpec {
  kiln_layer_kind kind = KILN_LAYER_LINEAR;
  int64_t in = 0, out = 0;  // Linear only
  bool bias = true;         // Linear only
  // LeakyReLU's slope, ELU's alpha, Softplus's beta, Dropout's probability.
  double arg = 0;
  double arg2 = 0;  // Softplus's threshold
};

// PyTorch's defaults for the parameters of the layers that have them.
constexpr double kDefaultLeakySlope = 0.01;         // torch.nn.LeakyReLU
constexpr double kDefaultEluAlpha = 1.0;            // torch.nn.ELU
constexpr double kDefaultSoftplusBeta = 1.0;        // torch.nn.Softplus
constexpr double kDefaultSoftplusThreshold = 20.0;  // torch.nn.Softplus
constexpr double kDefaultDropout = 0.5;             // torch.nn.Dropout

// An activation: a layer other than Linear, Dropout and the output transforms.
bool is_activation(kiln_layer_kind kind);
// Softmax or LogSoftmax.
bool is_output_transform(kiln_layer_kind kind);

// The flat-buffer elements of a Linear(in, out) (weights, bias and their
// alignment), after checking it fits KILN_MAX_PARAMETERS (INVALID_ARGUMENT).
// in, out >= 1.
int64_t linear_parameters(int64_t in, int64_t out, bool bias);

class ModelSpec {
 public:
  // Linear(in, out): sizes >= 1 (INVALID_ARGUMENT); in must equal the
  // previous Linear's out (SHAPE_MISMATCH).
  void add_linear(int64_t in, int64_t out, bool bias);
  // A parameterless layer (arg, arg2 as LayerSpec's; arg2 is used by
  // Softplus only); LeakyReLU's slope and ELU's alpha must be finite,
  // Softplus's beta finite and not 0 and its threshold finite, Dropout's p
  // in [0, 1) (INVALID_ARGUMENT). LINEAR is refused here (it needs sizes).
  void add(kiln_layer_kind kind, double arg, double arg2 = kDefaultSoftplusThreshold);
  // Linear(sizes[0], sizes[1]), act, ..., Linear(sizes[n-2], sizes[n-1]).
  void add_mlp(const int64_t *sizes, int64_t n, kiln_layer_kind activation);
  // An nn.Flatten(): no layer, one index (see above).
  void add_flatten();
  // The features per sample of a model that may have no Linear: only
  // before anything else (INVALID_ARGUMENT), >= 1; takes no index.
  void add_input(int64_t features);
  // Appends what `text` describes (either form); on failure nothing is added.
  void parse(const std::string &text);

  const std::vector<LayerSpec> &layers() const { return layers_; }
  // Layer i's index in nn.Sequential: i plus the Flattens before it.
  int64_t module_index(size_t i) const { return index_[i]; }
  // The nn.Sequential indices taken: every layer's and every Flatten's.
  int64_t module_count() const { return modules_; }
  // First Linear's in / last Linear's out; without a Linear, the declared
  // input's features (add_input), or 0.
  int64_t input_size() const;
  int64_t output_size() const;
  // The output transform (Softmax, LogSoftmax) ending the spec, or null.
  const LayerSpec *output_transform() const;
  // Throws INVALID_ARGUMENT unless the spec holds a Linear or declares its
  // input.
  void validate() const;
  std::string describe() const;

 private:
  void push(const LayerSpec &layer);

  std::vector<LayerSpec> layers_;
  std::vector<int64_t> index_;  // per layer: its module_index
  int64_t modules_ = 0;         // layers and Flattens so far
  int64_t input_ = 0;           // add_input's features, 0 when not declared
};

// "relu", "gelu", ... as the text forms spell layer kinds.
const char *layer_kind_name(kiln_layer_kind kind);

}  // namespace kiln
