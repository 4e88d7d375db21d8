// Writes the ONNX graphs test_onnx.c reads, through libonnx_proto (the same
// schema classes as the plugin, but none of its code), into a directory:
//
//   onnx_fixtures DIR
//
// Every parameter holds value(k, i) = (k + 1) * 0.1 * ((i % 7) - 3) for the
// k-th parameter of the file (counted as written, from 0) and its i-th
// element in the file's own layout, the formula test_onnx.c uses for its
// references. The good graphs are 4-3-2 MLPs in the forms exporters write;
// the bad ones each break one rule and name the node that breaks it.
// tests/fuzz/corpus_onnx holds copies of some of them as fuzz seeds.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace {

double value(int k, int64_t i) { return (k + 1) * 0.1 * double((i % 7) - 3); }

struct Builder {
  onnx::ModelProto model;
  onnx::GraphProto *g = model.mutable_graph();
  int32_t elem = onnx::TensorProto_DataType_FLOAT;
  int params = 0;

  Builder(int64_t opset, int32_t elem_type, std::vector<int64_t> input_dims, int64_t outputs) : elem(elem_type) {
    model.set_ir_version(8);
    model.add_opset_import()->set_version(opset);
    g->set_name("fixture");
    onnx::ValueInfoProto *in = g->add_input();
    in->set_name("x");
    auto *t = in->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem);
    t->mutable_shape()->add_dim()->set_dim_param("N");
    for (int64_t d : input_dims) t->mutable_shape()->add_dim()->set_dim_value(d);
    onnx::ValueInfoProto *out = g->add_output();
    out->set_name("y");
    auto *o = out->mutable_type()->mutable_tensor_type();
    o->set_elem_type(elem);
    o->mutable_shape()->add_dim()->set_dim_param("N");
    o->mutable_shape()->add_dim()->set_dim_value(outputs);
  }

  // A parameter of dims filled with value(k, i), as raw data of `type`.
  onnx::TensorProto *param(const std::string &name, std::vector<int64_t> dims, int32_t type = -1) {
    onnx::TensorProto *t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(type < 0 ? elem : type);
    int64_t n = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      n *= d;
    }
    const int k = params++;
    std::string raw;
    for (int64_t i = 0; i < n; ++i) {
      if (t->data_type() == onnx::TensorProto_DataType_DOUBLE) {
        const double v = value(k, i);
        raw.append(reinterpret_cast<const char *>(&v), 8);
      } else {
        const float v = float(value(k, i));
        raw.append(reinterpret_cast<const char *>(&v), 4);
      }
    }
    t->set_raw_data(raw);
    return t;
  }

  onnx::TensorProto *ints(const std::string &name, std::vector<int64_t> values) {
    onnx::TensorProto *t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto_DataType_INT64);
    t->add_dims(int64_t(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
    return t;
  }

  // A scalar as a Constant node (as torch.onnx.export writes GELU's).
  void constant(const std::string &name, double v) {
    onnx::NodeProto *n = node("Constant", name + ".const", {}, name);
    onnx::AttributeProto *a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto_AttributeType_TENSOR);
    a->mutable_t()->set_data_type(elem);
    if (elem == onnx::TensorProto_DataType_DOUBLE) a->mutable_t()->add_double_data(v);
    else a->mutable_t()->add_float_data(float(v));
  }

  onnx::NodeProto *node(const std::string &op, const std::string &name, std::vector<std::string> inputs,
                        const std::string &output) {
    onnx::NodeProto *n = g->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const std::string &in : inputs) n->add_input(in);
    n->add_output(output);
    return n;
  }

  static void attr_int(onnx::NodeProto *n, const char *name, int64_t v) {
    onnx::AttributeProto *a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_INT);
    a->set_i(v);
  }
  static void attr_float(onnx::NodeProto *n, const char *name, float v) {
    onnx::AttributeProto *a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
    a->set_f(v);
  }

  // The usual 4-3-2: Gemm(transB) -> activation node(s) -> Gemm(transB).
  void gemm(const std::string &name, const std::string &in, const std::string &out, int64_t o, int64_t i) {
    param(name + ".w", {o, i});
    param(name + ".b", {o});
    attr_int(node("Gemm", name, {in, name + ".w", name + ".b"}, out), "transB", 1);
  }

  void write(const std::string &dir, const std::string &file) const {
    std::ofstream f(dir + "/" + file, std::ios::binary);
    if (!model.SerializeToOstream(&f)) {
      std::fprintf(stderr, "onnx_fixtures: cannot write %s/%s\n", dir.c_str(), file.c_str());
      std::exit(1);
    }
  }
};

const int32_t F32 = onnx::TensorProto_DataType_FLOAT, F64 = onnx::TensorProto_DataType_DOUBLE;

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: onnx_fixtures DIR\n");
    return 2;
  }
  const std::string dir = argv[1];

  {  // Gemm(transB = 1) -> Relu -> Gemm(transB = 1), as torch.onnx.export writes nn.Linear.
    Builder b(13, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 3, 4);
    b.node("Relu", "relu", {"h"}, "a");
    b.gemm("fc2", "a", "y", 2, 3);
    b.write(dir, "gemm_relu.onnx");
  }
  {  // Gemm(transB = 0, alpha 2, beta 0.5, C [1, 3]) -> Tanh -> Gemm(transB = 0, no C).
    Builder b(13, F32, {4}, 2);
    b.param("w1", {4, 3});
    b.param("c1", {1, 3});
    onnx::NodeProto *g1 = b.node("Gemm", "scaled", {"x", "w1", "c1"}, "h");
    Builder::attr_float(g1, "alpha", 2.0f);
    Builder::attr_float(g1, "beta", 0.5f);
    b.node("Tanh", "tanh", {"h"}, "a");
    b.param("w2", {3, 2});
    b.node("Gemm", "plain", {"a", "w2"}, "y");
    b.write(dir, "gemm_trans0_alpha_beta.onnx");
  }
  {  // Gemm(transB = 1, beta 0.5, scalar C []) -> Relu -> Gemm(transB = 1, beta 2, C [1]): both
     // biases broadcast over the outputs.
    Builder b(13, F32, {4}, 2);
    b.param("w1", {3, 4});
    b.param("c1", {});
    onnx::NodeProto *g1 = b.node("Gemm", "scalar_c", {"x", "w1", "c1"}, "h");
    Builder::attr_int(g1, "transB", 1);
    Builder::attr_float(g1, "beta", 0.5f);
    b.node("Relu", "relu", {"h"}, "a");
    b.param("w2", {2, 3});
    b.param("c2", {1});
    onnx::NodeProto *g2 = b.node("Gemm", "one_c", {"a", "w2", "c2"}, "y");
    Builder::attr_int(g2, "transB", 1);
    Builder::attr_float(g2, "beta", 2.0f);
    b.write(dir, "gemm_scalar_bias.onnx");
  }
  {  // f64: Flatten [N, 2, 2] -> MatMul + Add(bias first) -> LeakyRelu(0.2) ->
     // Dropout(ratio 0.25 as an input, mask unused) -> MatMul + Add -> Sigmoid -> Identity.
    Builder b(13, F64, {2, 2}, 2);
    b.node("Flatten", "flatten", {"x"}, "flat");
    b.param("m1", {4, 3});
    b.node("MatMul", "mm1", {"flat", "m1"}, "p1");
    b.param("m1.bias", {3});
    b.node("Add", "add1", {"m1.bias", "p1"}, "h");
    Builder::attr_float(b.node("LeakyRelu", "leaky", {"h"}, "a"), "alpha", 0.2f);
    onnx::TensorProto *ratio = b.g->add_initializer();
    ratio->set_name("ratio");
    ratio->set_data_type(F64);
    ratio->add_double_data(0.25);
    onnx::NodeProto *drop = b.node("Dropout", "drop", {"a", "ratio"}, "d");
    drop->add_output("mask");
    b.param("m2", {3, 2});
    b.node("MatMul", "mm2", {"d", "m2"}, "p2");
    b.param("m2.bias", {2});
    b.node("Add", "add2", {"p2", "m2.bias"}, "s");
    b.node("Sigmoid", "sigmoid", {"s"}, "z");
    b.node("Identity", "identity", {"z"}, "y");
    b.write(dir, "matmul_add_f64.onnx");
  }
  {  // Reshape [N, 1, 4] by [-1, 4] -> Gemm -> Gelu (opset 20) -> Gemm.
    Builder b(20, F32, {1, 4}, 2);
    b.ints("shape", {-1, 4});
    b.node("Reshape", "reshape", {"x", "shape"}, "flat");
    b.gemm("fc1", "flat", "h", 3, 4);
    b.node("Gelu", "gelu", {"h"}, "a");
    b.gemm("fc2", "a", "y", 2, 3);
    b.write(dir, "gelu_op.onnx");
  }
  {  // Gemm -> GELU's erf form over Constant nodes, as torch.onnx.export writes nn.GELU -> Gemm.
    Builder b(13, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 3, 4);
    b.constant("sqrt2", std::sqrt(2.0));
    b.constant("one", 1.0);
    b.constant("half", 0.5);
    b.node("Div", "div", {"h", "sqrt2"}, "q");
    b.node("Erf", "erf", {"q"}, "e");
    b.node("Add", "add", {"e", "one"}, "s");
    b.node("Mul", "mul", {"h", "s"}, "m");
    b.node("Mul", "mul_half", {"m", "half"}, "a");
    b.gemm("fc2", "a", "y", 2, 3);
    b.write(dir, "gelu_erf.onnx");
  }

  // ---- refused graphs, each naming its node ----------------------------------
  {  // An op kiln does not read.
    Builder b(13, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 3, 4);
    b.node("Softmax", "mystery_softmax", {"h"}, "a");
    b.gemm("fc2", "a", "y", 2, 3);
    b.write(dir, "unknown_op.onnx");
  }
  {  // Not a chain: a residual connection.
    Builder b(13, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 3, 4);
    b.node("Relu", "branch_relu", {"h"}, "a");
    b.node("Add", "residual", {"h", "a"}, "r");
    b.gemm("fc2", "r", "y", 2, 3);
    b.write(dir, "not_chain.onnx");
  }
  {  // A weight whose data lives in an external file.
    Builder b(13, F32, {4}, 2);
    onnx::TensorProto *w = b.param("fc1.w", {3, 4});
    w->clear_raw_data();
    w->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
    onnx::StringStringEntryProto *loc = w->add_external_data();
    loc->set_key("location");
    loc->set_value("weights.bin");
    b.param("fc1.b", {3});
    Builder::attr_int(b.node("Gemm", "external_gemm", {"x", "fc1.w", "fc1.b"}, "y0"), "transB", 1);
    b.gemm("fc2", "y0", "y", 2, 3);
    b.write(dir, "external_data.onnx");
  }
  {  // A weight holding fewer bytes than its shape needs.
    Builder b(13, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 3, 4);
    b.g->mutable_initializer(0)->mutable_raw_data()->resize(20);
    b.node("Relu", "relu", {"h"}, "a");
    b.gemm("fc2", "a", "y", 2, 3);
    b.write(dir, "short_weight.onnx");
  }
  {  // A weight claiming [2^40, 2^40] elements with 16 bytes of data.
    Builder b(13, F32, {4}, 2);
    onnx::TensorProto *w = b.param("huge.w", {2, 2});
    w->set_dims(0, int64_t(1) << 40);
    w->set_dims(1, int64_t(1) << 40);
    Builder::attr_int(b.node("Gemm", "huge_gemm", {"x", "huge.w"}, "y"), "transB", 1);
    b.write(dir, "huge_dims.onnx");
  }
  {  // A DOUBLE weight in a FLOAT graph.
    Builder b(13, F32, {4}, 2);
    b.param("fc1.w", {3, 4}, F64);
    b.param("fc1.b", {3});
    Builder::attr_int(b.node("Gemm", "mixed_gemm", {"x", "fc1.w", "fc1.b"}, "h"), "transB", 1);
    b.gemm("fc2", "h", "y", 2, 3);
    b.write(dir, "mixed_dtype.onnx");
  }
  {  // A FLOAT16 weight.
    Builder b(13, F32, {4}, 2);
    onnx::TensorProto *w = b.param("fc1.w", {3, 4});
    w->set_data_type(onnx::TensorProto_DataType_FLOAT16);
    Builder::attr_int(b.node("Gemm", "half_gemm", {"x", "fc1.w"}, "y"), "transB", 1);
    b.write(dir, "f16_weight.onnx");
  }
  {  // Widths that do not chain: 4 -> 3, then a Gemm taking 5.
    Builder b(13, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 3, 4);
    b.gemm("misfit", "h", "y", 2, 5);
    b.write(dir, "width_mismatch.onnx");
  }
  {  // An opset kiln does not read.
    Builder b(99, F32, {4}, 2);
    b.gemm("fc1", "x", "y", 2, 4);
    b.write(dir, "opset_99.onnx");
  }
  {  // Gemm with transA = 1.
    Builder b(13, F32, {4}, 2);
    b.param("w", {2, 4});
    Builder::attr_int(b.node("Gemm", "transposed_a", {"x", "w"}, "y"), "transA", 1);
    b.write(dir, "trans_a.onnx");
  }
  {  // Flatten [N, 2, 2] at axis 2, which would make [2N, 2].
    Builder b(13, F32, {2, 2}, 2);
    Builder::attr_int(b.node("Flatten", "flatten_2", {"x"}, "flat"), "axis", 2);
    b.gemm("fc1", "flat", "y", 2, 4);
    b.write(dir, "flatten_axis_2.onnx");
  }
  {  // A Relu on the chain that writes no output.
    Builder b(13, F32, {4}, 3);
    b.gemm("fc1", "x", "h", 3, 4);
    b.node("Relu", "mute_relu", {"h"}, "y")->clear_output();
    b.write(dir, "no_output.onnx");
  }
  {  // A Relu given a second input.
    Builder b(13, F32, {4}, 3);
    b.gemm("fc1", "x", "h", 3, 4);
    b.param("extra", {3});
    b.node("Relu", "double_relu", {"h", "extra"}, "y");
    b.write(dir, "two_input_relu.onnx");
  }
  {  // A Reshape after the first layer.
    Builder b(13, F32, {4}, 3);
    b.gemm("fc1", "x", "h", 3, 4);
    b.ints("shape", {-1, 3});
    b.node("Reshape", "late_reshape", {"h", "shape"}, "y");
    b.write(dir, "late_reshape.onnx");
  }
  // ---- hostile graphs (issue 21): each refused before a loop or an
  // allocation that follows what it claims -------------------------------
  {  // A weight [0, 2^62]: no values, but transB = 0 made it 2^62 rows of nothing (it hung).
    Builder b(13, F32, {4}, 2);
    onnx::TensorProto *w = b.g->add_initializer();
    w->set_name("w");
    w->set_data_type(F32);
    w->add_dims(0);
    w->add_dims(int64_t(1) << 62);
    b.node("Gemm", "endless_gemm", {"x", "w"}, "y");
    b.write(dir, "zero_by_huge_weight.onnx");
  }
  {  // A MatMul weight [0, 2^30]: within the dimension limit, empty, 2^30 columns.
    Builder b(13, F32, {4}, 2);
    onnx::TensorProto *w = b.g->add_initializer();
    w->set_name("w");
    w->set_data_type(F32);
    w->add_dims(0);
    w->add_dims(int64_t(1) << 30);
    b.node("MatMul", "empty_matmul", {"x", "w"}, "y");
    b.write(dir, "empty_matmul_weight.onnx");
  }
  {  // Gemm and MatMul whose weight input is named "" (omitted): found by the fuzzer.
    Builder b(13, F32, {4}, 2);
    b.node("Gemm", "nameless_gemm", {"x", ""}, "y");
    b.write(dir, "gemm_empty_input.onnx");
    Builder m(13, F32, {4}, 2);
    m.node("MatMul", "nameless_matmul", {"x", ""}, "y");
    m.write(dir, "matmul_empty_input.onnx");
  }
  {  // 64 Gemms reading one [256, 256] weight: 64 times the values the file holds.
    Builder b(13, F32, {256}, 256);
    b.param("tied", {256, 256});
    for (int i = 0; i < 64; ++i)
      b.node("Gemm", "tied" + std::to_string(i), {i ? "h" + std::to_string(i - 1) : "x", "tied"},
             i == 63 ? "y" : "h" + std::to_string(i));
    b.write(dir, "tied_weights.onnx");
  }
  {  // A node off the chain (reading only constants).
    Builder b(13, F32, {4}, 2);
    b.gemm("fc1", "x", "y", 2, 4);
    b.node("Relu", "stray_relu", {"fc1.b"}, "unused");
    b.write(dir, "stray_node.onnx");
  }
  return 0;
}
