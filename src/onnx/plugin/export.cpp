// kiln_onnx_export: a kiln layer list as an ONNX ModelProto that
// onnx.checker accepts and ONNX Runtime runs.
//
// The graph: input "input" [batch, in] -> ... -> output [batch, out], batch
// a symbolic dimension; the output is "logits", or "probabilities" /
// "log_probabilities" after an output transform (Softmax / LogSoftmax with
// axis 1). Each Linear is one Gemm with transB = 1 over the weight in kiln's
// (= PyTorch's) [out, in] layout, named as nn.Sequential's state_dict names
// it ("0.weight", "0.bias"), so the initializers read like the kiln model
// file; with external data they refer to the data file instead of holding
// their bytes. GELU is written in its erf form, x * 0.5 * (1 + erf(x /
// sqrt 2)), as torch.onnx.export writes it: the Gelu op needs opset 20,
// which older runtimes and checkers refuse. Softplus is ONNX's Softplus for
// PyTorch's defaults (beta 1, threshold 20: ONNX's has no threshold, and
// differs from it by less than 2e-9 past it), Mul(x, beta) -> Softplus ->
// Div(beta) for another beta (as torch.onnx.export writes it), and that
// under Where(Greater(beta x, threshold), x, .) for another threshold, which
// is exact. Dropout is ONNX's Dropout of its ratio, which without
// training_mode is the identity in inference, and a Flatten (at any index
// that no layer has) ONNX's Flatten at axis 1: kiln's import reads both
// back, and each keeps its index of nn.Sequential, so the parameters after
// it keep their names.
#include <exception>
#include <new>
#include <stdexcept>

#include <onnx/onnx_pb.h>

#include "nn/spec.hpp"
#include "onnx/plugin/common.hpp"

namespace {

using kiln::OnnxGraph;
using kiln::OnnxLayer;

void set_tensor_type(onnx::ValueInfoProto *value, int32_t elem_type, int64_t features) {
  onnx::TypeProto_Tensor *t = value->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  onnx::TensorShapeProto *shape = t->mutable_shape();
  shape->add_dim()->set_dim_param("batch");
  shape->add_dim()->set_dim_value(features);
}

onnx::TensorProto *add_initializer(onnx::GraphProto *graph, const std::string &name, int32_t elem_type,
                                   std::initializer_list<int64_t> dims, const std::string &bytes) {
  onnx::TensorProto *t = graph->add_initializer();
  t->set_name(name);
  t->set_data_type(elem_type);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(bytes);
  return t;
}

void add_entry(onnx::TensorProto *t, const char *key, const std::string &value) {
  onnx::StringStringEntryProto *e = t->add_external_data();
  e->set_key(key);
  e->set_value(value);
}

// A parameter: its bytes inline, or (graph.data_location set) where they
// are in the data file.
void add_parameter(onnx::GraphProto *graph, const OnnxGraph &g, const std::string &name, int32_t elem_type,
                   std::initializer_list<int64_t> dims, const std::string &bytes, int64_t offset) {
  if (g.data_location.empty()) {
    add_initializer(graph, name, elem_type, dims, bytes);
    return;
  }
  onnx::TensorProto *t = add_initializer(graph, name, elem_type, dims, "");
  t->clear_raw_data();
  int64_t length = elem_type == onnx::TensorProto_DataType_FLOAT ? 4 : 8;
  for (int64_t d : dims) length *= d;
  t->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
  add_entry(t, "location", g.data_location);
  add_entry(t, "offset", std::to_string(offset));
  add_entry(t, "length", std::to_string(length));
  if (!g.data_checksum.empty()) add_entry(t, "checksum", g.data_checksum);
}

// A scalar initializer (GELU's constants), in the graph's dtype.
void add_scalar(onnx::GraphProto *graph, const std::string &name, int32_t elem_type, double value) {
  std::string bytes;
  if (elem_type == onnx::TensorProto_DataType_FLOAT) {
    const float f = float(value);
    bytes.assign(reinterpret_cast<const char *>(&f), sizeof f);
  } else {
    bytes.assign(reinterpret_cast<const char *>(&value), sizeof value);
  }
  add_initializer(graph, name, elem_type, {}, bytes);
}

onnx::NodeProto *add_node(onnx::GraphProto *graph, const std::string &op, const std::string &name,
                          std::initializer_list<std::string> inputs, const std::string &output) {
  onnx::NodeProto *node = graph->add_node();
  node->set_op_type(op);
  node->set_name(name);
  for (const std::string &in : inputs) node->add_input(in);
  node->add_output(output);
  return node;
}

void set_int(onnx::NodeProto *node, const char *name, int64_t value) {
  onnx::AttributeProto *a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INT);
  a->set_i(value);
}

void set_float(onnx::NodeProto *node, const char *name, double value) {
  onnx::AttributeProto *a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
  a->set_f(float(value));
}

// Softplus(beta, threshold) from `in` to `out` (see the top of the file).
void softplus(onnx::GraphProto *graph, int32_t elem, const std::string &prefix, const std::string &in,
              const std::string &out, double beta, double threshold) {
  if (beta == kiln::kDefaultSoftplusBeta && threshold == kiln::kDefaultSoftplusThreshold) {
    add_node(graph, "Softplus", prefix + ".softplus", {in}, out);
    return;
  }
  const std::string p = prefix + ".softplus";
  add_scalar(graph, p + ".beta", elem, beta);
  add_node(graph, "Mul", p + ".scale", {in, p + ".beta"}, p + ".scaled");
  add_node(graph, "Softplus", p, {p + ".scaled"}, p + ".unscaled");
  if (threshold == kiln::kDefaultSoftplusThreshold) {
    add_node(graph, "Div", p + ".div", {p + ".unscaled", p + ".beta"}, out);
    return;
  }
  add_node(graph, "Div", p + ".div", {p + ".unscaled", p + ".beta"}, p + ".curve");
  add_scalar(graph, p + ".threshold", elem, threshold);
  add_node(graph, "Greater", p + ".past", {p + ".scaled", p + ".threshold"}, p + ".linear");
  add_node(graph, "Where", p + ".where", {p + ".linear", in, p + ".curve"}, out);
}

void build(const OnnxGraph &g, const char *producer_version, onnx::ModelProto *model) {
  model->set_ir_version(kiln::onnx_plugin::kExportIrVersion);
  model->set_producer_name("kiln");
  model->set_producer_version(producer_version);
  onnx::OperatorSetIdProto *opset = model->add_opset_import();
  opset->set_domain("");
  opset->set_version(kiln::onnx_plugin::kExportOpset);

  onnx::GraphProto *graph = model->mutable_graph();
  graph->set_name("kiln_mlp");
  const int32_t elem = g.dtype == KILN_F64 ? onnx::TensorProto_DataType_DOUBLE : onnx::TensorProto_DataType_FLOAT;
  int64_t features = g.input_features;
  set_tensor_type(graph->add_input(), elem, features);
  graph->mutable_input(0)->set_name("input");

  std::string current = "input";
  bool gelu_constants = false;
  // The nodes in nn.Sequential's order: each index's layer, or a Flatten
  // where no layer has it. The last writes the output, named for the last
  // layer.
  const kiln_layer_kind last_kind = g.layers.empty() ? KILN_LAYER_LINEAR : g.layers.back().kind;
  const std::string output = last_kind == KILN_LAYER_SOFTMAX       ? "probabilities"
                             : last_kind == KILN_LAYER_LOG_SOFTMAX ? "log_probabilities"
                                                                   : "logits";
  if (g.modules == 0) add_node(graph, "Identity", "identity", {current}, output);  // a model of its input alone
  size_t next = 0;  // the next layer; the indices between layers are Flattens
  for (int64_t m = 0; m < g.modules; ++m) {
    const std::string prefix = std::to_string(m);
    const std::string out = m + 1 == g.modules ? output : prefix + ".out";
    if (next == g.layers.size() || g.layers[next].module != m) {  // nn.Flatten() of [batch, features]
      set_int(add_node(graph, "Flatten", prefix + ".flatten", {current}, out), "axis", 1);
      current = out;
      continue;
    }
    const OnnxLayer &l = g.layers[next++];
    switch (l.kind) {
      case KILN_LAYER_LINEAR: {
        features = l.out;
        add_parameter(graph, g, prefix + ".weight", elem, {l.out, l.in}, l.weight, l.weight_offset);
        onnx::NodeProto *gemm;
        if (l.has_bias) {
          add_parameter(graph, g, prefix + ".bias", elem, {l.out}, l.bias, l.bias_offset);
          gemm = add_node(graph, "Gemm", prefix + ".linear", {current, prefix + ".weight", prefix + ".bias"}, out);
        } else {
          gemm = add_node(graph, "Gemm", prefix + ".linear", {current, prefix + ".weight"}, out);
        }
        set_int(gemm, "transB", 1);
        break;
      }
      case KILN_LAYER_RELU: add_node(graph, "Relu", prefix + ".relu", {current}, out); break;
      case KILN_LAYER_TANH: add_node(graph, "Tanh", prefix + ".tanh", {current}, out); break;
      case KILN_LAYER_SIGMOID: add_node(graph, "Sigmoid", prefix + ".sigmoid", {current}, out); break;
      case KILN_LAYER_LEAKY_RELU:
        set_float(add_node(graph, "LeakyRelu", prefix + ".leaky_relu", {current}, out), "alpha", l.arg);
        break;
      case KILN_LAYER_GELU:
        if (!gelu_constants) {
          add_scalar(graph, "gelu.sqrt2", elem, 1.4142135623730951);
          add_scalar(graph, "gelu.one", elem, 1.0);
          add_scalar(graph, "gelu.half", elem, 0.5);
          gelu_constants = true;
        }
        add_node(graph, "Div", prefix + ".gelu.div", {current, "gelu.sqrt2"}, prefix + ".gelu.scaled");
        add_node(graph, "Erf", prefix + ".gelu.erf", {prefix + ".gelu.scaled"}, prefix + ".gelu.erf");
        add_node(graph, "Add", prefix + ".gelu.add", {prefix + ".gelu.erf", "gelu.one"}, prefix + ".gelu.sum");
        add_node(graph, "Mul", prefix + ".gelu.mul", {current, prefix + ".gelu.sum"}, prefix + ".gelu.product");
        add_node(graph, "Mul", prefix + ".gelu.half", {prefix + ".gelu.product", "gelu.half"}, out);
        break;
      case KILN_LAYER_ELU:
        set_float(add_node(graph, "Elu", prefix + ".elu", {current}, out), "alpha", l.arg);
        break;
      case KILN_LAYER_SELU: add_node(graph, "Selu", prefix + ".selu", {current}, out); break;
      case KILN_LAYER_SOFTPLUS: softplus(graph, elem, prefix, current, out, l.arg, l.arg2); break;
      case KILN_LAYER_SOFTMAX:
      case KILN_LAYER_LOG_SOFTMAX:
        set_int(add_node(graph, l.kind == KILN_LAYER_SOFTMAX ? "Softmax" : "LogSoftmax", prefix + ".softmax", {current},
                         out),
                "axis", 1);
        break;
      case KILN_LAYER_DROPOUT:  // without training_mode: the identity in inference
        // The ratio in double (ONNX lets it have its own float type) reads
        // back as the same p in a float model too.
        add_scalar(graph, prefix + ".ratio", onnx::TensorProto_DataType_DOUBLE, l.arg);
        add_node(graph, "Dropout", prefix + ".dropout", {current, prefix + ".ratio"}, out);
        break;
    }
    current = out;
  }
  if (next != g.layers.size()) throw std::logic_error("the layers' nn.Sequential indices are not below modules");
  set_tensor_type(graph->add_output(), elem, features);
  graph->mutable_output(0)->set_name(output);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) kiln_status kiln_onnx_export(const kiln::OnnxGraph *graph,
                                                                    const char *producer_version, std::string *bytes,
                                                                    char *reason, int64_t reason_size) {
  try {
    onnx::ModelProto model;
    build(*graph, producer_version, &model);
    // Protobuf cannot serialize a message of 2 GiB or more.
    const size_t size = model.ByteSizeLong();
    if (size > size_t(kiln::onnx_plugin::kMaxFileBytes))
      return kiln::onnx_plugin::refuse(KILN_ERROR_NOT_SUPPORTED,
                                       "the model needs " + std::to_string(size) +
                                           " bytes as ONNX, more than the limit KILN_ONNX_MAX_FILE_BYTES",
                                       reason, reason_size);
    if (!model.SerializeToString(bytes))
      return kiln::onnx_plugin::refuse(KILN_ERROR_INTERNAL, "protobuf could not serialize the model", reason,
                                       reason_size);
    return KILN_OK;
  } catch (const std::bad_alloc &) {
    return kiln::onnx_plugin::refuse(KILN_ERROR_OUT_OF_MEMORY, "out of host memory while building the ONNX graph",
                                     reason, reason_size);
  } catch (const std::exception &e) {
    return kiln::onnx_plugin::refuse(KILN_ERROR_INTERNAL, e.what(), reason, reason_size);
  }
}

}
