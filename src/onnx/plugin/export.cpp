// kiln_onnx_export: a kiln layer list as an ONNX ModelProto that
// onnx.checker accepts and ONNX Runtime runs.
//
// The graph: input "input" [batch, in] -> ... -> output "logits"
// [batch, out], batch a symbolic dimension. Each Linear is one Gemm with
// transB = 1 over the weight in kiln's (= PyTorch's) [out, in] layout, named
// as nn.Sequential's state_dict names it ("0.weight", "0.bias"), so the
// initializers read like the kiln model file. GELU is written in its erf
// form, x * 0.5 * (1 + erf(x / sqrt 2)), as torch.onnx.export writes it:
// the Gelu op needs opset 20, which older runtimes and checkers refuse.
// Dropout is an identity in inference and is left out.
#include <exception>
#include <new>

#include <onnx/onnx_pb.h>

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

void add_initializer(onnx::GraphProto *graph, const std::string &name, int32_t elem_type,
                     std::initializer_list<int64_t> dims, const std::string &bytes) {
  onnx::TensorProto *t = graph->add_initializer();
  t->set_name(name);
  t->set_data_type(elem_type);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(bytes);
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
  int64_t features = 0;
  for (const OnnxLayer &l : g.layers)
    if (l.kind == KILN_LAYER_LINEAR) {
      features = l.in;
      break;
    }
  set_tensor_type(graph->add_input(), elem, features);
  graph->mutable_input(0)->set_name("input");

  std::string current = "input";
  bool gelu_constants = false;
  // The last layer that is not a Dropout writes "logits"; a model ending in
  // a Dropout still needs its last real node to do so.
  size_t last = g.layers.size();
  while (last > 0 && g.layers[last - 1].kind == KILN_LAYER_DROPOUT) --last;
  for (size_t i = 0; i < g.layers.size(); ++i) {
    const OnnxLayer &l = g.layers[i];
    if (l.kind == KILN_LAYER_DROPOUT) continue;
    const std::string prefix = std::to_string(i);
    const std::string out = i + 1 == last ? "logits" : prefix + ".out";
    switch (l.kind) {
      case KILN_LAYER_LINEAR: {
        features = l.out;
        add_initializer(graph, prefix + ".weight", elem, {l.out, l.in}, l.weight);
        onnx::NodeProto *gemm;
        if (l.has_bias) {
          add_initializer(graph, prefix + ".bias", elem, {l.out}, l.bias);
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
      case KILN_LAYER_DROPOUT: break;
    }
    current = out;
  }
  set_tensor_type(graph->add_output(), elem, features);
  graph->mutable_output(0)->set_name("logits");
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
