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
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <tuple>
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

  // The graph's batch fixed at `batch` instead of "N", as torch.onnx.export
  // writes it without dynamic axes.
  void fixed_batch(int64_t batch) {
    g->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_value(batch);
    g->mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_value(batch);
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
  static void attr_ints(onnx::NodeProto *n, const char *name, std::vector<int64_t> v) {
    onnx::AttributeProto *a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void attr_float(onnx::NodeProto *n, const char *name, float v) {
    onnx::AttributeProto *a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
    a->set_f(v);
  }

  // The usual 4-3-2: Gemm(transB) -> activation node(s) -> Gemm(transB).
  // Its parameters are name.w and name.b, or module.weight and module.bias
  // (as PyTorch names them) given a module.
  void gemm(const std::string &name, const std::string &in, const std::string &out, int64_t o, int64_t i,
            const std::string &module = "") {
    const std::string w = module.empty() ? name + ".w" : module + ".weight";
    const std::string bias = module.empty() ? name + ".b" : module + ".bias";
    param(w, {o, i});
    param(bias, {o});
    attr_int(node("Gemm", name, {in, w, bias}, out), "transB", 1);
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

void write_file(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "onnx_fixtures: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

// The data file of the external data fixtures: 16 bytes of padding, then
// value(0, i) as float32 for i < 12 (fc1's weight [3, 4]). Its SHA-1 is
// kExternalSha1, from Python's hashlib (an implementation other than kiln's).
std::string external_bytes() {
  std::string bytes(16, 'x');
  for (int i = 0; i < 12; ++i) {
    const float v = float(value(0, i));
    bytes.append(reinterpret_cast<const char *>(&v), 4);
  }
  return bytes;
}
const char *const kExternalSha1 = "52DE6F8C5C81EF87B556BBC25FC6FCA67F1D5EF7";  // upper case: any case reads

// A 4-3-2 MLP (Gemm -> Relu -> Gemm, parameters k = 0..3) whose fc1 weight
// keeps its data in a file: `entries` are its external_data (key, value).
void external_fixture(const std::string &dir, const std::string &file,
                      std::vector<std::pair<std::string, std::string>> entries) {
  Builder b(13, F32, {4}, 2);
  onnx::TensorProto *w = b.param("fc1.w", {3, 4});
  w->clear_raw_data();
  w->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
  for (const auto &[key, val] : entries) {
    onnx::StringStringEntryProto *e = w->add_external_data();
    e->set_key(key);
    e->set_value(val);
  }
  b.param("fc1.b", {3});
  Builder::attr_int(b.node("Gemm", "external_gemm", {"x", "fc1.w", "fc1.b"}, "h"), "transB", 1);
  b.node("Relu", "relu", {"h"}, "a");
  b.gemm("fc2", "a", "y", 2, 3);
  b.write(dir, file);
}

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
  {  // torch.onnx.export's nn.Flatten of a traced batch of 1, without dynamic axes: input [1, 1, 4],
     // Reshape by [1, 4] -> Gemm -> Relu -> Gemm.
    Builder b(18, F32, {1, 4}, 2);
    b.fixed_batch(1);
    b.ints("shape", {1, 4});
    b.node("Reshape", "node_view", {"x", "shape"}, "flat");
    b.gemm("fc1", "flat", "h", 3, 4);
    b.node("Relu", "relu", {"h"}, "a");
    b.gemm("fc2", "a", "y", 2, 3);
    b.write(dir, "reshape_fixed_batch.onnx");
  }
  // x.view(x.size(0), -1) as the TorchScript exporter writes it with a dynamic batch: input [N, 2, 2],
  // Shape -> Gather(0) [-> Unsqueeze(0)] -> Concat(., [-1]) -> Reshape -> Gemm -> Relu -> Gemm; the
  // Unsqueeze's axes an input from opset 13, an attribute before, and no Unsqueeze for an index of [0].
  // batch_flatten_row_index.onnx gathers dimension 1 instead: no flatten of the batch, refused.
  for (const auto &[file, opset, index_dims, index] :
       std::vector<std::tuple<const char *, int64_t, std::vector<int64_t>, int64_t>>{
           {"batch_flatten.onnx", 13, {}, 0},
           {"batch_flatten_opset11.onnx", 11, {}, 0},
           {"batch_flatten_index_list.onnx", 13, {1}, 0},
           {"batch_flatten_row_index.onnx", 13, {}, 1}}) {
    Builder b(opset, F32, {2, 2}, 2);
    onnx::TensorProto *at = b.ints("index", {index});
    at->clear_dims();
    for (int64_t d : index_dims) at->add_dims(d);
    b.ints("minus_one", {-1});
    b.node("Shape", "shape", {"x"}, "dims");
    b.node("Gather", "gather", {"dims", "index"}, "n");
    std::string rows = "n";
    if (index_dims.empty()) {
      rows = "n1";
      if (opset >= 13) {
        b.ints("axis0", {0});
        b.node("Unsqueeze", "unsqueeze", {"n", "axis0"}, rows);
      } else {
        Builder::attr_ints(b.node("Unsqueeze", "unsqueeze", {"n"}, rows), "axes", {0});
      }
    }
    Builder::attr_int(b.node("Concat", "concat", {rows, "minus_one"}, "to"), "axis", 0);
    b.node("Reshape", "view", {"x", "to"}, "flat");
    b.gemm("fc1", "flat", "h", 3, 4);
    b.node("Relu", "relu", {"h"}, "a");
    b.gemm("fc2", "a", "y", 2, 3);
    b.write(dir, file);
  }
  {  // nn.SiLU between the Gemms, as both exporters write it: Mul(h, Sigmoid(h)).
    Builder b(18, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 3, 4);
    b.node("Sigmoid", "sigmoid", {"h"}, "s");
    b.node("Mul", "silu", {"h", "s"}, "a");
    b.gemm("fc2", "a", "y", 2, 3);
    b.write(dir, "silu.onnx");
  }
  {  // nn.GELU(approximate="tanh") as opset 17 writes it: 0.5 h (1 + tanh(0.79788456 (h + 0.044715 h^3))).
    Builder b(17, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 3, 4);
    b.constant("c", 0.044715);
    b.constant("k", 0.7978845608);
    b.constant("one", 1.0);
    b.constant("half", 0.5);
    b.node("Mul", "sq", {"h", "h"}, "h2");
    b.node("Mul", "cube", {"h", "h2"}, "h3");
    b.node("Mul", "scaled_cube", {"c", "h3"}, "ch3");
    b.node("Add", "inner", {"h", "ch3"}, "u");
    b.node("Mul", "scaled", {"k", "u"}, "ku");
    b.node("Tanh", "tanh", {"ku"}, "t");
    b.node("Add", "plus_one", {"one", "t"}, "t1");
    b.node("Mul", "times_h", {"h", "t1"}, "ht");
    b.node("Mul", "times_half", {"half", "ht"}, "a");
    b.gemm("fc2", "a", "y", 2, 3);
    b.write(dir, "gelu_tanh_ops.onnx");
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
  {  // The same with the products the other way round, as torch.export's exporter writes it (opset 18):
     // Div -> Erf -> Add 1 -> Mul(0.5, .) -> Mul(x, .).
    Builder b(18, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 3, 4);
    b.constant("sqrt2", std::sqrt(2.0));
    b.constant("one", 1.0);
    b.constant("half", 0.5);
    b.node("Div", "div", {"h", "sqrt2"}, "q");
    b.node("Erf", "erf", {"q"}, "e");
    b.node("Add", "add", {"e", "one"}, "s");
    b.node("Mul", "mul_half", {"half", "s"}, "m");
    b.node("Mul", "mul", {"h", "m"}, "a");
    b.gemm("fc2", "a", "y", 2, 3);
    b.write(dir, "gelu_erf_torch_export.onnx");
  }

  // ---- constant folding, opsets 7 and 8, the new layers ----------------------
  {  // Transpose(W) -> MatMul, as older exporters write nn.Linear without a bias.
    Builder b(13, F32, {4}, 2);
    b.param("w1", {3, 4});
    Builder::attr_ints(b.node("Transpose", "transpose_w1", {"w1"}, "w1t"), "perm", {1, 0});
    b.node("MatMul", "mm1", {"x", "w1t"}, "h");
    b.node("Relu", "relu", {"h"}, "a");
    b.gemm("fc2", "a", "y", 2, 3);
    b.write(dir, "transpose_matmul.onnx");
  }
  {  // Cast, Reshape, Identity, Unsqueeze, Squeeze of constants and a Constant of value_floats:
     // Gemm(x, Identity(Reshape(Cast(w [12] DOUBLE), [4, 3])), Unsqueeze(c [3], [0])) -> Tanh
     // -> MatMul by Squeeze(w2 [1, 3, 2], [0]).
    Builder b(13, F32, {4}, 2);
    b.param("w_flat", {12}, F64);
    Builder::attr_int(b.node("Cast", "cast", {"w_flat"}, "w_cast"), "to", F32);
    b.ints("shape", {4, 3});
    b.node("Reshape", "reshape_w", {"w_cast", "shape"}, "w");
    b.node("Identity", "same_w", {"w"}, "w_id");
    onnx::NodeProto *c = b.node("Constant", "c_const", {}, "c_flat");
    onnx::AttributeProto *a = c->add_attribute();
    a->set_name("value_floats");
    a->set_type(onnx::AttributeProto_AttributeType_FLOATS);
    for (float v : {0.1f, 0.2f, 0.3f}) a->add_floats(v);
    b.ints("axes0", {0});
    b.node("Unsqueeze", "unsqueeze_c", {"c_flat", "axes0"}, "c_row");
    b.node("Gemm", "folded_gemm", {"x", "w_id", "c_row"}, "h");
    b.node("Tanh", "tanh", {"h"}, "t");
    b.param("w2", {1, 3, 2});
    b.node("Squeeze", "squeeze_w2", {"w2", "axes0"}, "w2_2d");
    b.node("MatMul", "mm2", {"t", "w2_2d"}, "y");
    b.write(dir, "folded_constants.onnx");
  }
  {  // Opset 7: Gemm -> Dropout(ratio attribute) -> Relu -> Gemm over Squeeze(axes attribute).
    Builder b(7, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 3, 4);
    Builder::attr_float(b.node("Dropout", "drop7", {"h"}, "d"), "ratio", 0.25f);
    b.node("Relu", "relu", {"d"}, "a");
    b.param("fc2.w3", {1, 2, 3});
    Builder::attr_ints(b.node("Squeeze", "squeeze7", {"fc2.w3"}, "fc2.w"), "axes", {0});
    b.param("fc2.b", {2});
    Builder::attr_int(b.node("Gemm", "fc2", {"a", "fc2.w", "fc2.b"}, "y"), "transB", 1);
    b.write(dir, "opset7.onnx");
  }
  {  // Opset 8: Flatten [N, 2, 2] -> Gemm -> LeakyRelu -> Gemm -> Softmax (axis 1, opset 8's default).
    Builder b(8, F32, {2, 2}, 2);
    b.node("Flatten", "flatten", {"x"}, "flat");
    b.gemm("fc1", "flat", "h", 3, 4);
    Builder::attr_float(b.node("LeakyRelu", "leaky", {"h"}, "a"), "alpha", 0.2f);
    b.gemm("fc2", "a", "z", 2, 3);
    b.node("Softmax", "softmax8", {"z"}, "y");
    b.write(dir, "opset8_softmax.onnx");
  }
  {  // f64: Gemm -> Elu(0.5) -> Gemm -> Selu -> Gemm -> Softplus -> Gemm -> Mul(beta 2) ->
     // Softplus -> Div(2), nn.Softplus(beta=2) as torch.onnx.export writes it -> Gemm -> LogSoftmax.
    Builder b(13, F64, {4}, 2);
    b.gemm("fc1", "x", "h1", 3, 4);
    Builder::attr_float(b.node("Elu", "elu", {"h1"}, "a1"), "alpha", 0.5f);
    b.gemm("fc2", "a1", "h2", 3, 3);
    b.node("Selu", "selu", {"h2"}, "a2");
    b.gemm("fc3", "a2", "h3", 3, 3);
    b.node("Softplus", "softplus", {"h3"}, "a3");
    b.gemm("fc4", "a3", "h4", 3, 3);
    b.constant("beta", 2.0);
    b.node("Mul", "scale", {"h4", "beta"}, "s4");
    b.node("Softplus", "softplus2", {"s4"}, "u4");
    b.node("Div", "unscale", {"u4", "beta"}, "a4");
    b.gemm("fc5", "a4", "z", 2, 3);
    Builder::attr_int(b.node("LogSoftmax", "log_softmax", {"z"}, "y"), "axis", 1);
    b.write(dir, "new_activations_f64.onnx");
  }
  {  // Softplus with its threshold written out, as PyTorch's torch.export-based exporter writes
     // nn.Softplus(threshold=0.5): Where(Greater(h, 0.5), h, Softplus(h)), between Gemms.
    Builder b(18, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 3, 4);
    b.node("Softplus", "curve", {"h"}, "sp");
    onnx::TensorProto *t = b.g->add_initializer();
    t->set_name("threshold");
    t->set_data_type(F32);
    t->add_float_data(0.5f);
    b.node("Greater", "past", {"h", "threshold"}, "c");
    b.node("Where", "where", {"c", "h", "sp"}, "a");
    b.gemm("fc2", "a", "y", 2, 3);
    b.write(dir, "softplus_where.onnx");
  }
  {  // An activation alone: [N, 2, 3] -> Elu(2), a model without a Linear.
    Builder b(13, F32, {2, 3}, 6);
    Builder::attr_float(b.node("Elu", "lonely_elu", {"x"}, "y"), "alpha", 2.0f);
    b.write(dir, "activation_only.onnx");
  }
  // ---- external data -------------------------------------------------------
  write_file(dir + "/external_ok.bin", external_bytes());
  external_fixture(dir, "external_ok.onnx",
                   {{"location", "external_ok.bin"}, {"offset", "16"}, {"length", "48"}, {"checksum", kExternalSha1}});
  // The same file through a symbolic link that stays in the folder, with no length.
  std::remove((dir + "/link_inside.bin").c_str());
  if (symlink("external_ok.bin", (dir + "/link_inside.bin").c_str()) != 0) std::exit(1);
  external_fixture(dir, "external_link_inside.onnx", {{"location", "link_inside.bin"}, {"offset", "16"}});
  // And refused: each breaks one rule, and names it.
  std::remove((dir + "/escape.bin").c_str());
  if (symlink("/etc/hostname", (dir + "/escape.bin").c_str()) != 0) std::exit(1);
  external_fixture(dir, "external_symlink_out.onnx", {{"location", "escape.bin"}});
  external_fixture(dir, "external_absolute.onnx", {{"location", "/etc/passwd"}});
  external_fixture(dir, "external_dotdot.onnx", {{"location", "../onnx_fixture_files/external_ok.bin"}});
  external_fixture(dir, "external_past_end.onnx", {{"location", "external_ok.bin"}, {"offset", "20"}});
  external_fixture(dir, "external_length.onnx", {{"location", "external_ok.bin"}, {"length", "40"}});
  external_fixture(dir, "external_offset_text.onnx", {{"location", "external_ok.bin"}, {"offset", "16 bytes"}});
  external_fixture(dir, "external_key.onnx", {{"location", "external_ok.bin"}, {"basepath", "/"}});
  external_fixture(dir, "external_checksum.onnx",
                   {{"location", "external_ok.bin"}, {"offset", "16"}, {"checksum", std::string(40, '0')}});
  external_fixture(dir, "external_no_location.onnx", {{"offset", "16"}});
  // Seeds of tests/fuzz/corpus_onnx, for the harness's folder (fuzz_onnx.c: data.bin, escape.bin).
  external_fixture(dir, "fuzz_external_data.onnx", {{"location", "data.bin"}, {"offset", "16"}, {"length", "48"}});
  external_fixture(dir, "fuzz_external_escape.onnx", {{"location", "escape.bin"}, {"offset", "0"}});
  external_fixture(dir, "fuzz_external_checksum.onnx",
                   {{"location", "data.bin"}, {"checksum", "da39a3ee5e6b4b0d3255bfef95601890afd80709"}});

  // ---- refused graphs, each naming its node ----------------------------------
  {  // An op kiln does not read.
    Builder b(13, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 3, 4);
    b.node("Softsign", "mystery_softsign", {"h"}, "a");
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
  // Gemm -> Relu -> Gemm with the initializers named as PyTorch's state_dict names them: an index
  // the names skip (an nn.Dropout the exporter left out), a Flatten at the input outside the
  // nn.Sequential (PyTorch's quickstart) and inside it, and names that do not keep the indices in order.
  for (const auto &[file, flatten, first, second] :
       std::vector<std::tuple<std::string, bool, std::string, std::string>>{
           {"names_left_out.onnx", false, "0", "3"},
           {"names_outside_flatten.onnx", true, "linear_relu_stack.0", "linear_relu_stack.2"},
           {"names_inside_flatten.onnx", true, "1", "3"},
           {"names_out_of_order.onnx", false, "40", "0"}}) {
    Builder b(13, F32, flatten ? std::vector<int64_t>{2, 2} : std::vector<int64_t>{4}, 2);
    if (flatten) b.node("Flatten", "flatten", {"x"}, "flat");
    b.gemm("fc1", flatten ? "flat" : "x", "h", 3, 4, first);
    b.node("Relu", "relu", {"h"}, "a");
    b.gemm("fc2", "a", "y", 2, 3, second);
    b.write(dir, file);
  }
  {  // Gemm -> Flatten (of [N, 3]: the same values) -> Relu -> Gemm: an nn.Flatten() between layers.
    Builder b(13, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 3, 4);
    b.node("Flatten", "mid_flatten", {"h"}, "f");
    b.node("Relu", "relu", {"f"}, "a");
    b.gemm("fc2", "a", "y", 2, 3);
    b.write(dir, "flatten_mid_chain.onnx");
  }
  {  // An input of unknown shape -> MatMul -> Flatten: of [N, 2, 4], the MatMul would make [N, 2, 3] and
     // the Flatten [N, 6].
    Builder b(13, F32, {4}, 2);
    b.g->mutable_input(0)->mutable_type()->mutable_tensor_type()->clear_shape();
    b.param("w", {4, 3});
    b.node("MatMul", "mm", {"x", "w"}, "h");
    b.node("Flatten", "flatten_unknown_rank", {"h"}, "f");
    b.gemm("fc2", "f", "y", 2, 3);
    b.write(dir, "flatten_unknown_rank.onnx");
  }
  {  // A Reshape to a written-out batch that is not the input's: [2, 1, 4] to [1, 8] merges samples.
    Builder b(18, F32, {1, 4}, 2);
    b.fixed_batch(2);
    b.ints("shape", {1, 8});
    b.node("Reshape", "merging_reshape", {"x", "shape"}, "flat");
    b.gemm("fc1", "flat", "y", 2, 8);
    b.write(dir, "reshape_other_batch.onnx");
  }
  {  // A Reshape to a written-out batch of 1 where the input's batch is symbolic.
    Builder b(18, F32, {1, 4}, 2);
    b.ints("shape", {1, 4});
    b.node("Reshape", "one_row_reshape", {"x", "shape"}, "flat");
    b.gemm("fc1", "flat", "y", 2, 4);
    b.write(dir, "reshape_symbolic_batch.onnx");
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
  {  // Opset 6 (Gemm's "broadcast"): refused, naming the converter.
    Builder b(6, F32, {4}, 2);
    b.gemm("fc1", "x", "y", 2, 4);
    b.write(dir, "opset6.onnx");
  }
  {  // GELU's erf form at opset 8, which has no Erf.
    Builder b(8, F32, {4}, 3);
    b.gemm("fc1", "x", "h", 3, 4);
    b.constant("sqrt2", std::sqrt(2.0));
    b.constant("one", 1.0);
    b.constant("half", 0.5);
    b.node("Div", "div", {"h", "sqrt2"}, "q");
    b.node("Erf", "early_erf", {"q"}, "e");
    b.node("Add", "add", {"e", "one"}, "s");
    b.node("Mul", "mul", {"h", "s"}, "m");
    b.node("Mul", "mul_half", {"m", "half"}, "y");
    b.write(dir, "erf_opset8.onnx");
  }
  {  // A Softmax that the chain goes on after.
    Builder b(13, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 3, 4);
    b.node("Softmax", "middle_softmax", {"h"}, "a");
    b.gemm("fc2", "a", "y", 2, 3);
    b.write(dir, "softmax_not_last.onnx");
  }
  {  // Softmax along one axis of a rank-3 value (opset 13): not each sample's features.
    Builder b(13, F32, {2, 3}, 6);
    b.node("Elu", "elu", {"x"}, "a");
    Builder::attr_int(b.node("Softmax", "axis_softmax", {"a"}, "y"), "axis", 2);
    b.write(dir, "softmax_axis.onnx");
  }
  {  // Dropout with training_mode true: random in inference.
    Builder b(13, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 2, 4);
    b.constant("ratio", 0.5);
    onnx::TensorProto *mode = b.g->add_initializer();
    mode->set_name("training");
    mode->set_data_type(onnx::TensorProto_DataType_BOOL);
    mode->add_int32_data(1);
    b.node("Dropout", "training_dropout", {"h", "ratio", "training"}, "y");
    b.write(dir, "dropout_training.onnx");
  }
  {  // SELU with another alpha than PyTorch's.
    Builder b(13, F32, {4}, 2);
    b.gemm("fc1", "x", "h", 2, 4);
    Builder::attr_float(b.node("Selu", "custom_selu", {"h"}, "y"), "alpha", 2.0f);
    b.write(dir, "selu_custom.onnx");
  }
  {  // Folding refusals: a Cast to INT32, a Reshape of 12 values to [5, 3], a Transpose by [0, 0].
    Builder c(13, F32, {4}, 3);
    c.param("w", {3, 4});
    Builder::attr_int(c.node("Cast", "cast_int32", {"w"}, "wi"), "to", onnx::TensorProto_DataType_INT32);
    Builder::attr_int(c.node("Gemm", "fc1", {"x", "wi"}, "y"), "transB", 1);
    c.write(dir, "cast_int32.onnx");
    Builder r(13, F32, {4}, 3);
    r.param("w", {12});
    r.ints("shape", {5, 3});
    r.node("Reshape", "bad_reshape", {"w", "shape"}, "w2");
    r.node("MatMul", "mm", {"x", "w2"}, "y");
    r.write(dir, "reshape_bad.onnx");
    Builder t(13, F32, {4}, 3);
    t.param("w", {3, 4});
    Builder::attr_ints(t.node("Transpose", "bad_transpose", {"w"}, "wt"), "perm", {0, 0});
    t.node("MatMul", "mm", {"x", "wt"}, "y");
    t.write(dir, "transpose_bad.onnx");
  }
  {  // An activation alone on an input whose features are symbolic: no width to give the model.
    Builder b(13, F32, {}, 1);
    b.g->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_param("F");
    b.node("Relu", "relu", {"x"}, "y");
    b.write(dir, "no_features.onnx");
  }
  {  // A node off the chain (reading only constants).
    Builder b(13, F32, {4}, 2);
    b.gemm("fc1", "x", "y", 2, 4);
    b.node("Relu", "stray_relu", {"fc1.b"}, "unused");
    b.write(dir, "stray_node.onnx");
  }
  return 0;
}
