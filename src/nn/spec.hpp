// ModelSpec: the layer list of a sequential MLP, built layer by layer, from
// sizes, or parsed from text; and its text form (describe), which parse reads
// back, so a saved model can record its architecture in one string.
//
// Two text forms:
//  - compact, for the usual MLP: "784-256-10" (ReLU between Linears),
//    "784-256-10:gelu", "784-256-10:relu:dropout=0.2" (Dropout after each
//    hidden activation), activations relu, gelu, tanh, sigmoid, leaky_relu or
//    leaky_relu=SLOPE, and ":flatten" for an nn.Flatten() first;
//  - a layer list, for everything else: "flatten;linear(784,32);relu;
//    dropout(0.2);linear(32,10,nobias);leaky_relu(0.1);sigmoid".
// describe() writes the compact form whenever it says the same thing.
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
  double arg = 0;           // LeakyReLU's slope, Dropout's probability
};

// The flat-buffer elements of a Linear(in, out) (weights, bias and their
// alignment), after checking it fits KILN_MAX_PARAMETERS (INVALID_ARGUMENT).
// in, out >= 1.
int64_t linear_parameters(int64_t in, int64_t out, bool bias);

class ModelSpec {
 public:
  // Linear(in, out): sizes >= 1 (INVALID_ARGUMENT); in must equal the
  // previous Linear's out (SHAPE_MISMATCH).
  void add_linear(int64_t in, int64_t out, bool bias);
  // A parameterless layer; LeakyReLU's slope must be finite, Dropout's p in
  // [0, 1) (INVALID_ARGUMENT). LINEAR is refused here (it needs sizes).
  void add(kiln_layer_kind kind, double arg);
  // Linear(sizes[0], sizes[1]), act, ..., Linear(sizes[n-2], sizes[n-1]).
  void add_mlp(const int64_t *sizes, int64_t n, kiln_layer_kind activation);
  // An nn.Flatten(): no layer, one index (see above).
  void add_flatten() { ++modules_; }
  // Appends what `text` describes (either form); on failure nothing is added.
  void parse(const std::string &text);

  const std::vector<LayerSpec> &layers() const { return layers_; }
  // Layer i's index in nn.Sequential: i plus the Flattens before it.
  int64_t module_index(size_t i) const { return index_[i]; }
  // First Linear's in / last Linear's out; 0 without a Linear.
  int64_t input_size() const;
  int64_t output_size() const;
  // Throws INVALID_ARGUMENT unless the spec holds at least one Linear.
  void validate() const;
  std::string describe() const;

 private:
  void push(const LayerSpec &layer);

  std::vector<LayerSpec> layers_;
  std::vector<int64_t> index_;  // per layer: its module_index
  int64_t modules_ = 0;         // layers and Flattens so far
};

// "relu", "gelu", ... as the text forms spell layer kinds.
const char *layer_kind_name(kiln_layer_kind kind);

}  // namespace kiln
