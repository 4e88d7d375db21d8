// kiln_onnx_import: an ONNX ModelProto read as a kiln layer list, or refused.
//
// kiln reads MLPs: one graph input, one graph output, and between them one
// chain of nodes, each taking the previous node's output as its data input
// and constants (initializers or Constant nodes) for everything else. The
// walk follows the values from the input to the output rather than the node
// order, so any topological order reads the same; every node must lie on
// the chain. One exception to "each value feeds one node" is GELU's erf form
// (x * 0.5 * (1 + erf(x / sqrt 2)), as torch.onnx.export and kiln write it),
// which is matched whole.
//
// Everything the file claims is checked before it is used, so that nothing
// is allocated beyond a small multiple of the file's size and no loop runs
// longer than the file is: the census of its wire format (wire_census.hpp)
// before protobuf parses it, every constant's dimensions and element count
// against the values it holds before anything is decoded or walked, and the
// values decoded in all against the file's size (a graph that reads one huge
// constant from thousands of nodes is refused, not decoded thousands of times).
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <unordered_map>
#include <vector>

#include <onnx/onnx_pb.h>

#include "core/excerpt.hpp"
#include "onnx/plugin/common.hpp"
#include "onnx/plugin/wire_census.hpp"

namespace {

using kiln::OnnxGraph;
using kiln::OnnxLayer;

struct Refusal {
  kiln_status status;
  std::string message;
};

[[noreturn]] void refuse(kiln_status status, const std::string &message) { throw Refusal{status, message}; }

// A name from the file, quoted, in a short excerpt (core/excerpt.hpp), so a
// hostile name cannot make a message unbounded or break a terminal.
std::string quoted(const std::string &name) { return "\"" + kiln::excerpt(name, 60) + "\""; }

std::string dims_text(const std::vector<int64_t> &dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

const char *type_name(int32_t type) {
  return onnx::TensorProto_DataType_IsValid(type)
             ? onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(type)).c_str()
             : "an unknown type";
}

// A constant's values: floats and doubles as double (exact), int64 as is.
struct Values {
  int32_t type = 0;
  std::vector<int64_t> dims;
  int64_t count = 1;
  std::vector<double> f;
  std::vector<int64_t> i;
};

template <typename T>
void read_raw(const std::string &raw, int64_t count, std::vector<T> *out) {
  out->resize(size_t(count));
  if (count) std::memcpy(out->data(), raw.data(), size_t(count) * sizeof(T));
}

// The most values the import decodes from constants in all, for a file of
// `size` bytes: twice as many as it has bytes (each value takes at least one),
// and room for the scalars of GELU's form and Dropout that nodes share.
constexpr int64_t decode_budget(int64_t size) { return 2 * size + (int64_t(1) << 20); }

class Reader {
 public:
  Reader(const onnx::ModelProto &model, int64_t file_size)
      : model_(model), g_(model.graph()), decode_left_(decode_budget(file_size)) {}

  OnnxGraph read() {
    check_versions();
    index_values();
    find_input_and_output();
    walk();
    return std::move(out_);
  }

 private:
  const onnx::ModelProto &model_;
  const onnx::GraphProto &g_;
  std::unordered_map<std::string, const onnx::TensorProto *> constants_;
  std::unordered_map<std::string, std::vector<int>> consumers_;
  std::unordered_map<std::string, int> producers_;
  std::vector<bool> done_;
  std::string input_, output_;
  int32_t elem_ = 0;       // the graph's float type
  int64_t features_ = 0;   // the width of the value at hand (0: not known yet)
  int64_t decode_left_;    // values constant() may still decode
  OnnxGraph out_;

  void check_versions() {
    if (model_.ir_version() < 3 || model_.ir_version() > 12)
      refuse(KILN_ERROR_NOT_SUPPORTED, "the file has ONNX IR version " + std::to_string(model_.ir_version()) +
                                           "; kiln reads IR versions 3 to 12");
    bool found = false;
    for (const onnx::OperatorSetIdProto &o : model_.opset_import()) {
      if (!o.domain().empty() && o.domain() != "ai.onnx") continue;
      found = true;
      if (o.version() < kiln::onnx_plugin::kMinImportOpset || o.version() > kiln::onnx_plugin::kMaxImportOpset)
        refuse(KILN_ERROR_NOT_SUPPORTED,
               "the file uses opset " + std::to_string(o.version()) + " of the ONNX domain; kiln reads opsets " +
                   std::to_string(kiln::onnx_plugin::kMinImportOpset) + " to " +
                   std::to_string(kiln::onnx_plugin::kMaxImportOpset));
    }
    if (!found) refuse(KILN_ERROR_FORMAT, "the file imports no opset of the ONNX domain");
  }

  void define(const std::string &name, const std::string &by) {
    if (name.empty()) return;
    if (constants_.count(name) || producers_.count(name))
      refuse(KILN_ERROR_FORMAT, "value " + quoted(name) + " is defined twice (again by " + by + ")");
  }

  void index_values() {
    for (const onnx::TensorProto &t : g_.initializer()) {
      define(t.name(), "an initializer");
      constants_[t.name()] = &t;
    }
    done_.assign(size_t(g_.node_size()), false);
    for (int n = 0; n < g_.node_size(); ++n) {
      const onnx::NodeProto &node = g_.node(n);
      if (!node.domain().empty() && node.domain() != "ai.onnx")
        refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " is in domain " + quoted(node.domain()) +
                                             "; kiln reads only ONNX's own ops");
      if (node.op_type() == "Constant") {
        if (node.output_size() != 1 || node.attribute_size() != 1 || node.attribute(0).name() != "value" ||
            node.attribute(0).type() != onnx::AttributeProto_AttributeType_TENSOR)
          refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " is not a Constant of one tensor \"value\"");
        define(node.output(0), node_name(n));
        constants_[node.output(0)] = &node.attribute(0).t();
        done_[size_t(n)] = true;
        continue;
      }
      for (const std::string &in : node.input())
        if (!in.empty()) consumers_[in].push_back(n);
      for (const std::string &o : node.output()) {
        define(o, node_name(n));
        if (!o.empty()) producers_[o] = n;
      }
    }
  }

  void find_input_and_output() {
    int inputs = 0;
    for (const onnx::ValueInfoProto &v : g_.input()) {
      if (constants_.count(v.name())) continue;  // IR < 4 lists initializers as inputs too
      ++inputs;
      input_ = v.name();
      const onnx::TypeProto &type = v.type();
      if (!type.has_tensor_type())
        refuse(KILN_ERROR_NOT_SUPPORTED, "the graph input " + quoted(v.name()) + " is not a tensor");
      elem_ = type.tensor_type().elem_type();
      if (elem_ != onnx::TensorProto_DataType_FLOAT && elem_ != onnx::TensorProto_DataType_DOUBLE)
        refuse(KILN_ERROR_NOT_SUPPORTED, "the graph input " + quoted(v.name()) + " is " + type_name(elem_) +
                                             "; kiln models are FLOAT or DOUBLE");
      if (type.tensor_type().has_shape()) {
        const onnx::TensorShapeProto &shape = type.tensor_type().shape();
        if (shape.dim_size() < 2)
          refuse(KILN_ERROR_NOT_SUPPORTED, "the graph input " + quoted(v.name()) + " has " +
                                               std::to_string(shape.dim_size()) +
                                               " dimensions; kiln reads [batch, features...]");
        int64_t features = 1;
        for (int d = 1; d < shape.dim_size() && features; ++d) {
          const int64_t n = shape.dim(d).has_dim_value() ? shape.dim(d).dim_value() : 0;
          if (n <= 0 || n > KILN_MAX_PARAMETERS / features) features = 0;  // symbolic or absurd: the Linear decides
          else features *= n;
        }
        features_ = features;
      }
    }
    if (inputs != 1)
      refuse(KILN_ERROR_NOT_SUPPORTED, "the graph has " + std::to_string(inputs) +
                                           " inputs besides its initializers; kiln reads MLPs of one input");
    if (g_.output_size() != 1)
      refuse(KILN_ERROR_NOT_SUPPORTED, "the graph has " + std::to_string(g_.output_size()) +
                                           " outputs; kiln reads MLPs of one output");
    output_ = g_.output(0).name();
    out_.dtype = elem_ == onnx::TensorProto_DataType_DOUBLE ? KILN_F64 : KILN_F32;
    out_.input_features = features_;
  }

  std::string node_name(int n) const {
    const onnx::NodeProto &node = g_.node(n);
    return "node " + (node.name().empty() ? "#" + std::to_string(n) : quoted(node.name())) + " (" +
           quoted(node.op_type()) + ")";
  }

  const std::vector<int> &users(const std::string &value) const {
    static const std::vector<int> none;
    auto it = consumers_.find(value);
    return it == consumers_.end() ? none : it->second;
  }

  // The constant `name`, an input of node n: FORMAT when the input is empty
  // (an omitted optional input where the op needs one) or not a constant.
  const onnx::TensorProto &constant_proto(int n, const std::string &name) const {
    auto it = constants_.find(name);
    if (it == constants_.end())
      refuse(KILN_ERROR_FORMAT, node_name(n) + (name.empty() ? " leaves an input it needs empty"
                                                             : " reads " + quoted(name) + ", which is not a constant"));
    return *it->second;
  }

  // The dimensions and element count of constant `name` of node n, checked
  // before anything depends on them: no dimension negative or larger than
  // any file kiln reads could fill, no count larger than that either (a
  // weight [0, 2^62] holds no values but would drive a loop of 2^62 rows).
  Values shape_of(int n, const std::string &name) const {
    const onnx::TensorProto &t = constant_proto(n, name);
    const std::string what = node_name(n) + ": constant " + quoted(name);
    Values v;
    v.type = t.data_type();
    for (int64_t d : t.dims()) {
      if (d < 0) refuse(KILN_ERROR_FORMAT, what + " has a negative dimension");
      if (d > kiln::onnx_plugin::kMaxFileBytes)
        refuse(KILN_ERROR_FORMAT, what + " has a dimension of " + std::to_string(d) +
                                      ", more elements than any file kiln reads can hold");
      if (d > 0 && v.count > kiln::onnx_plugin::kMaxFileBytes / d)
        refuse(KILN_ERROR_FORMAT, what + " claims more elements than any file kiln reads can hold");
      v.count *= d;
      v.dims.push_back(d);
    }
    return v;
  }

  // The constant `name` of node n, checked (shape_of) and decoded.
  Values constant(int n, const std::string &name) {
    const onnx::TensorProto &t = constant_proto(n, name);
    const std::string what = node_name(n) + ": constant " + quoted(name);
    if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL || t.external_data_size() > 0)
      refuse(KILN_ERROR_NOT_SUPPORTED, what + " keeps its data in an external file; kiln reads self-contained "
                                              "files (onnx.save(model, path, save_as_external_data=False))");
    if (t.has_segment()) refuse(KILN_ERROR_NOT_SUPPORTED, what + " is a segment of a tensor");
    Values v = shape_of(n, name);
    // The values it holds, in raw bytes (width bytes each) or in the typed
    // field, must be as many as its shape says.
    const std::string &raw = t.raw_data();
    const bool in_raw = t.has_raw_data();
    int64_t width = 0, typed = 0;
    switch (v.type) {
      case onnx::TensorProto_DataType_FLOAT: width = 4, typed = t.float_data_size(); break;
      case onnx::TensorProto_DataType_DOUBLE: width = 8, typed = t.double_data_size(); break;
      case onnx::TensorProto_DataType_INT64: width = 8, typed = t.int64_data_size(); break;
      // Dropout's training_mode: one byte per element in raw data, else int32_data.
      case onnx::TensorProto_DataType_BOOL: width = 1, typed = t.int32_data_size(); break;
      default:
        refuse(KILN_ERROR_NOT_SUPPORTED,
               what + " is " + type_name(v.type) + "; kiln reads FLOAT and DOUBLE parameters (and INT64 shapes)");
    }
    const int64_t held = in_raw ? (int64_t(raw.size()) % width ? -1 : int64_t(raw.size()) / width) : typed;
    if (held != v.count)
      refuse(KILN_ERROR_FORMAT, what + " has shape " + dims_text(v.dims) + " (" + std::to_string(v.count) +
                                    " elements) but holds " + std::to_string(held) +
                                    (in_raw ? " elements of raw data" : " values"));
    if (v.count > decode_left_)
      refuse(KILN_ERROR_NOT_SUPPORTED, what + " would take the values the graph's nodes read from constants past " +
                                           "twice the file's size: kiln reads graphs whose nodes share few constants");
    decode_left_ -= v.count;
    switch (v.type) {
      case onnx::TensorProto_DataType_FLOAT:
        if (in_raw) {
          std::vector<float> f;
          read_raw(raw, v.count, &f);
          v.f.assign(f.begin(), f.end());
        } else {
          v.f.assign(t.float_data().begin(), t.float_data().end());
        }
        break;
      case onnx::TensorProto_DataType_DOUBLE:
        if (in_raw) read_raw(raw, v.count, &v.f);
        else v.f.assign(t.double_data().begin(), t.double_data().end());
        break;
      case onnx::TensorProto_DataType_INT64:
        if (in_raw) read_raw(raw, v.count, &v.i);
        else v.i.assign(t.int64_data().begin(), t.int64_data().end());
        break;
      default:  // BOOL
        if (in_raw) for (char c : raw) v.i.push_back(c != 0);
        else v.i.assign(t.int32_data().begin(), t.int32_data().end());
    }
    for (double x : v.f)
      if (!std::isfinite(x)) refuse(KILN_ERROR_FORMAT, what + " holds a value that is not finite");
    return v;
  }

  // A parameter: the graph's float type, as the input is.
  Values parameter(int n, const std::string &name) {
    Values v = constant(n, name);
    if (v.type != elem_)
      refuse(KILN_ERROR_FORMAT, node_name(n) + ": parameter " + quoted(name) + " is " + type_name(v.type) +
                                    " but the graph's input is " + type_name(elem_));
    return v;
  }

  // A float scalar ([] or [1]), of any float type.
  double scalar(int n, const std::string &name) {
    const Values v = constant(n, name);
    if (v.f.size() != 1 || v.dims.size() > 1)
      refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + ": " + quoted(name) + " must be a float scalar, it is " +
                                           type_name(v.type) + " " + dims_text(v.dims));
    return v.f[0];
  }

  // Whether `name` is a constant scalar of value want; decodes only a
  // constant of one element.
  bool is_scalar(int n, const std::string &name, double want) {
    if (!constants_.count(name) || shape_of(n, name).count != 1) return false;
    const Values v = constant(n, name);
    return v.f.size() == 1 && v.dims.size() <= 1 && std::fabs(v.f[0] - want) <= 1e-6 * std::fabs(want);
  }

  // Checks node n's attributes against the names it may have; returns the
  // one called `name` or null.
  const onnx::AttributeProto *attribute(int n, const char *name) const {
    for (const onnx::AttributeProto &a : g_.node(n).attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  void allow_attributes(int n, std::initializer_list<const char *> names) const {
    for (const onnx::AttributeProto &a : g_.node(n).attribute()) {
      bool known = false;
      for (const char *name : names) known = known || a.name() == name;
      if (!known) refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " has attribute " + quoted(a.name()) +
                                                      ", which kiln does not read");
    }
  }
  int64_t int_attribute(int n, const char *name, int64_t fallback) const {
    const onnx::AttributeProto *a = attribute(n, name);
    if (!a) return fallback;
    if (a->type() != onnx::AttributeProto_AttributeType_INT)
      refuse(KILN_ERROR_FORMAT, node_name(n) + ": attribute \"" + name + "\" is not an integer");
    return a->i();
  }
  double float_attribute(int n, const char *name, double fallback) const {
    const onnx::AttributeProto *a = attribute(n, name);
    if (!a) return fallback;
    if (a->type() != onnx::AttributeProto_AttributeType_FLOAT || !std::isfinite(a->f()))
      refuse(KILN_ERROR_FORMAT, node_name(n) + ": attribute \"" + name + "\" is not a finite float");
    // ONNX attributes are float32: 0.1 arrives as 0.100000001490116. The
    // shortest decimal that reads back as the same float is what the writer
    // meant, and keeps the model's description (leaky_relu(0.1)) as written.
    char text[32];
    *std::to_chars(text, text + sizeof text - 1, a->f()).ptr = '\0';
    return std::strtod(text, nullptr);
  }

  // Node n must read the value at hand as its first input and nothing else
  // but constants from inputs 1..max_inputs-1; returns its data output.
  const std::string &take(int n, const std::string &current, int min_inputs, int max_inputs) {
    const onnx::NodeProto &node = g_.node(n);
    if (node.input_size() < min_inputs || node.input_size() > max_inputs)
      refuse(KILN_ERROR_FORMAT, node_name(n) + " has " + std::to_string(node.input_size()) + " inputs, " +
                                    node.op_type() + " takes " + std::to_string(min_inputs) + " to " +
                                    std::to_string(max_inputs));
    if (node.input(0) != current)
      refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " reads " + quoted(current) +
                                           " as another input than its first; kiln reads MLPs whose nodes form "
                                           "one chain");
    for (int k = 1; k < node.input_size(); ++k) {
      if (node.input(k) == current)
        refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " reads " + quoted(current) + " twice");
      if (!node.input(k).empty() && !constants_.count(node.input(k)))
        refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " reads " + quoted(node.input(k)) +
                                             ", which is neither an initializer nor a Constant: kiln reads MLPs "
                                             "whose nodes form one chain");
    }
    if (node.output_size() < 1 || node.output(0).empty())
      refuse(KILN_ERROR_FORMAT, node_name(n) + " has no output");
    // Only the first output may be used (Dropout's mask must not be).
    for (int k = 1; k < node.output_size(); ++k)
      if (!node.output(k).empty() && (!users(node.output(k)).empty() || node.output(k) == output_))
        refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + "'s output " + quoted(node.output(k)) +
                                             " is used; kiln reads only the first output of a node");
    visit(n);
    return node.output(0);
  }

  void visit(int n) {
    if (done_[size_t(n)]) refuse(KILN_ERROR_FORMAT, node_name(n) + " is reached twice: the graph has a cycle");
    done_[size_t(n)] = true;
  }

  // The only node reading `value`, or -1 when it is not exactly one.
  int only_user(const std::string &value) const {
    const std::vector<int> &u = users(value);
    return u.size() == 1 && value != output_ ? u[0] : -1;
  }

  static std::string bytes_of(const std::vector<double> &values, int32_t elem) {
    std::string bytes;
    if (elem == onnx::TensorProto_DataType_FLOAT) {
      bytes.resize(values.size() * sizeof(float));
      float *p = reinterpret_cast<float *>(&bytes[0]);
      for (size_t i = 0; i < values.size(); ++i) p[i] = float(values[i]);
    } else {
      bytes.resize(values.size() * sizeof(double));
      std::memcpy(&bytes[0], values.data(), bytes.size());
    }
    return bytes;
  }

  // Node n's 2-D weight, [in, out] as the file lays it out for MatMul and
  // Gemm without transB, [out, in] with it; refused unless both sizes are at
  // least 1, before any loop over them (then in * out is the count of values
  // the file holds).
  Values weight_of(int n, const std::string &name, bool out_first, int64_t *in, int64_t *out) {
    Values b = parameter(n, name);
    if (b.dims.size() != 2)
      refuse(KILN_ERROR_FORMAT, node_name(n) + ": weight " + quoted(name) + " has shape " + dims_text(b.dims) +
                                    ", not 2-D");
    *out = out_first ? b.dims[0] : b.dims[1];
    *in = out_first ? b.dims[1] : b.dims[0];
    if (*in < 1 || *out < 1)
      refuse(KILN_ERROR_FORMAT, node_name(n) + "'s weight is empty ([" + std::to_string(*out) + ", " +
                                    std::to_string(*in) + "] as [out, in])");
    if (features_ && *in != features_)
      refuse(KILN_ERROR_FORMAT, node_name(n) + "'s weight takes " + std::to_string(*in) +
                                    " features but its input has " + std::to_string(features_));
    return b;
  }

  // A Linear from node n: weight [out, in] and an optional bias [out]
  // (weight_of checked the sizes).
  void add_linear(int n, int64_t in, int64_t out, const std::vector<double> &weight, const std::vector<double> *bias) {
    OnnxLayer l;
    l.kind = KILN_LAYER_LINEAR;
    l.in = in;
    l.out = out;
    l.weight = bytes_of(weight, elem_);
    if (bias) {
      l.has_bias = true;
      l.bias = bytes_of(*bias, elem_);
    }
    l.node = node_name(n);
    out_.layers.push_back(std::move(l));
    features_ = out;
  }

  void add_layer(int n, kiln_layer_kind kind, double arg = 0) {
    OnnxLayer l;
    l.kind = kind;
    l.arg = arg;
    l.node = node_name(n);
    out_.layers.push_back(std::move(l));
  }

  // A bias of `out` elements from a constant of shape [out], [1, out], or a
  // scalar ([] or [1]) broadcast, times beta.
  std::vector<double> bias_of(int n, const std::string &name, int64_t out, double beta) {
    const Values c = parameter(n, name);
    std::vector<double> bias;
    if (c.count == 1 && c.dims.size() <= 1 && out != 1) {
      bias.assign(size_t(out), c.f[0] * beta);
    } else if ((c.dims.size() == 1 && c.dims[0] == out) || (c.dims.size() == 2 && c.dims[0] == 1 && c.dims[1] == out) ||
               (c.dims.empty() && out == 1)) {
      bias.reserve(size_t(out));
      for (double x : c.f) bias.push_back(x * beta);
    } else {
      refuse(KILN_ERROR_FORMAT, node_name(n) + ": bias " + quoted(name) + " has shape " + dims_text(c.dims) +
                                    ", not [" + std::to_string(out) + "]");
    }
    return bias;
  }

  std::string gemm(int n, const std::string &current) {
    allow_attributes(n, {"alpha", "beta", "transA", "transB"});
    const std::string &result = take(n, current, 2, 3);
    const onnx::NodeProto &node = g_.node(n);
    if (int_attribute(n, "transA", 0) != 0)
      refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " has transA = 1; kiln reads Gemm over [batch, features]");
    const int64_t trans_b = int_attribute(n, "transB", 0);
    if (trans_b != 0 && trans_b != 1) refuse(KILN_ERROR_FORMAT, node_name(n) + " has transB other than 0 or 1");
    const double alpha = float_attribute(n, "alpha", 1.0), beta = float_attribute(n, "beta", 1.0);
    int64_t in = 0, out = 0;
    const Values b = weight_of(n, node.input(1), trans_b != 0, &in, &out);
    std::vector<double> weight(b.f.size());
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i)
        weight[size_t(o * in + i)] = alpha * b.f[size_t(trans_b ? o * in + i : i * out + o)];
    const bool has_c = node.input_size() == 3 && !node.input(2).empty() && beta != 0;
    std::vector<double> bias;
    if (has_c) bias = bias_of(n, node.input(2), out, beta);
    add_linear(n, in, out, weight, has_c ? &bias : nullptr);
    return result;
  }

  // MatMul by a constant [in, out], and the Add of a bias right after it
  // when there is one (as exporters write a Linear on inputs of rank > 2).
  std::string matmul(int n, const std::string &current) {
    allow_attributes(n, {});
    std::string result = take(n, current, 2, 2);
    int64_t in = 0, out = 0;
    const Values b = weight_of(n, g_.node(n).input(1), false, &in, &out);
    std::vector<double> weight(b.f.size());
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) weight[size_t(o * in + i)] = b.f[size_t(i * out + o)];
    const int add = only_user(result);
    if (add >= 0 && g_.node(add).op_type() == "Add" && g_.node(add).input_size() == 2) {
      const onnx::NodeProto &a = g_.node(add);
      const std::string &other = a.input(0) == result ? a.input(1) : a.input(0);
      if (other != result && constants_.count(other)) {
        allow_attributes(add, {});
        const std::vector<double> bias = bias_of(add, other, out, 1.0);
        visit(add);
        if (a.output_size() != 1 || a.output(0).empty()) refuse(KILN_ERROR_FORMAT, node_name(add) + " has no output");
        add_linear(n, in, out, weight, &bias);
        return a.output(0);
      }
    }
    add_linear(n, in, out, weight, nullptr);
    return result;
  }

  std::string dropout(int n, const std::string &current) {
    allow_attributes(n, {"ratio", "seed"});
    const std::string &result = take(n, current, 1, 3);
    const onnx::NodeProto &node = g_.node(n);
    double p = float_attribute(n, "ratio", 0.5);
    if (node.input_size() >= 2 && !node.input(1).empty()) p = scalar(n, node.input(1));
    if (node.input_size() == 3 && !node.input(2).empty()) {
      const Values mode = constant(n, node.input(2));
      if (mode.type != onnx::TensorProto_DataType_BOOL || mode.count != 1)
        refuse(KILN_ERROR_FORMAT, node_name(n) + ": training_mode is not a boolean scalar");
    }
    if (!(p >= 0 && p < 1))
      refuse(KILN_ERROR_FORMAT, node_name(n) + " has ratio " + std::to_string(p) + "; kiln's Dropout takes [0, 1)");
    add_layer(n, KILN_LAYER_DROPOUT, p);
    return result;
  }

  // Flatten or Reshape to [batch, features], before any layer.
  std::string reshape(int n, const std::string &current, bool flatten) {
    if (!out_.layers.empty())
      refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " comes after the first layer; kiln reads Flatten and "
                                                      "Reshape only at the input");
    if (flatten) {
      allow_attributes(n, {"axis"});
      const std::string &result = take(n, current, 1, 1);
      if (int_attribute(n, "axis", 1) != 1)
        refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " flattens at another axis than 1");
      return result;
    }
    allow_attributes(n, {"allowzero"});
    const std::string &result = take(n, current, 2, 2);
    const Values shape = constant(n, g_.node(n).input(1));
    if (shape.type != onnx::TensorProto_DataType_INT64 || shape.count != 2)
      refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " reshapes to " + std::to_string(shape.count) +
                                           " dimensions; kiln reads a Reshape to [batch, features]");
    const int64_t batch = shape.i[0], width = shape.i[1];
    const bool zero_copies = int_attribute(n, "allowzero", 0) == 0;
    const bool batch_kept = batch == -1 || (batch == 0 && zero_copies);
    if (!batch_kept || width == 0 || width < -1 || (width == -1 && (batch == -1 || !features_)))
      refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " reshapes to [" + std::to_string(batch) + ", " +
                                           std::to_string(width) + "]; kiln reads [-1, features] or [0, features]");
    if (width > 0) {
      if (features_ && width != features_)
        refuse(KILN_ERROR_FORMAT, node_name(n) + " reshapes rows of " + std::to_string(features_) + " features to " +
                                      std::to_string(width));
      features_ = width;
      out_.input_features = width;
    }
    return result;
  }

  // GELU's erf form from `current`, which feeds exactly the nodes of
  // users(current): Div(x, sqrt 2) -> Erf -> Add 1 -> Mul(x, .) -> Mul 0.5.
  // Returns its output, or "" when the nodes are anything else.
  std::string gelu_erf(const std::string &current) {
    const std::vector<int> &u = users(current);
    if (u.size() != 2) return "";
    for (int first = 0; first < 2; ++first) {
      const int div = u[size_t(first)], mul = u[size_t(1 - first)];
      const onnx::NodeProto &d = g_.node(div);
      if (d.op_type() != "Div" || d.input_size() != 2 || d.input(0) != current || d.output_size() != 1 ||
          !is_scalar(div, d.input(1), std::sqrt(2.0)))
        continue;
      const int erf = only_user(d.output(0));
      if (erf < 0 || g_.node(erf).op_type() != "Erf" || g_.node(erf).input_size() != 1 ||
          g_.node(erf).output_size() != 1)
        continue;
      const int add = only_user(g_.node(erf).output(0));
      if (add < 0 || g_.node(add).op_type() != "Add" || g_.node(add).input_size() != 2 ||
          g_.node(add).output_size() != 1)
        continue;
      const onnx::NodeProto &a = g_.node(add);
      const std::string &one = a.input(0) == g_.node(erf).output(0) ? a.input(1) : a.input(0);
      if (!is_scalar(add, one, 1.0) || only_user(a.output(0)) != mul) continue;
      const onnx::NodeProto &m = g_.node(mul);
      if (m.op_type() != "Mul" || m.input_size() != 2 || m.output_size() != 1 ||
          !((m.input(0) == current && m.input(1) == a.output(0)) || (m.input(1) == current && m.input(0) == a.output(0))))
        continue;
      const int half = only_user(m.output(0));
      if (half < 0 || g_.node(half).op_type() != "Mul" || g_.node(half).input_size() != 2 ||
          g_.node(half).output_size() != 1)
        continue;
      const onnx::NodeProto &h = g_.node(half);
      const std::string &c = h.input(0) == m.output(0) ? h.input(1) : h.input(0);
      if (!is_scalar(half, c, 0.5)) continue;
      for (int node : {div, erf, add, mul, half}) {
        allow_attributes(node, {});
        visit(node);
      }
      add_layer(div, KILN_LAYER_GELU);
      return h.output(0);
    }
    return "";
  }

  std::string not_a_chain(const std::string &current) const {
    const std::vector<int> &u = users(current);
    std::string message = "the graph is not a chain: value " + quoted(current) + " feeds " + node_name(u[0]);
    if (u.size() > 1) message += " and " + node_name(u[1]);
    if (u.size() > 2) message += " and " + std::to_string(u.size() - 2) + " more";
    if (current == output_) message += ", and it is the graph's output";
    return message + "; kiln reads MLPs whose nodes form one chain";
  }

  void walk() {
    std::string current = input_;
    while (true) {
      const std::vector<int> &u = users(current);
      if (current == output_ && u.empty()) break;
      if (u.empty()) {
        auto p = producers_.find(current);
        refuse(KILN_ERROR_FORMAT, "value " + quoted(current) +
                                      (p == producers_.end() ? "" : " (from " + node_name(p->second) + ")") +
                                      " is neither read by a node nor the graph's output " + quoted(output_));
      }
      if (u.size() > 1 || current == output_) {
        const std::string next = current == output_ ? "" : gelu_erf(current);
        if (next.empty()) refuse(KILN_ERROR_NOT_SUPPORTED, not_a_chain(current));
        current = next;
        continue;
      }
      const int n = u[0];
      const std::string &op = g_.node(n).op_type();
      if (op == "Gemm") {
        current = gemm(n, current);
      } else if (op == "MatMul") {
        current = matmul(n, current);
      } else if (op == "Relu" || op == "Tanh" || op == "Sigmoid") {
        allow_attributes(n, {});
        current = take(n, current, 1, 1);
        add_layer(n, op == "Relu" ? KILN_LAYER_RELU : op == "Tanh" ? KILN_LAYER_TANH : KILN_LAYER_SIGMOID);
      } else if (op == "LeakyRelu") {
        allow_attributes(n, {"alpha"});
        current = take(n, current, 1, 1);
        add_layer(n, KILN_LAYER_LEAKY_RELU, float_attribute(n, "alpha", 0.01));
      } else if (op == "Gelu") {
        allow_attributes(n, {"approximate"});
        current = take(n, current, 1, 1);
        const onnx::AttributeProto *a = attribute(n, "approximate");
        if (a && a->s() != "none")
          refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " is GELU's " + quoted(a->s()) +
                                               " approximation; kiln's GELU is the exact (erf) one");
        add_layer(n, KILN_LAYER_GELU);
      } else if (op == "Identity") {
        allow_attributes(n, {});
        current = take(n, current, 1, 1);
      } else if (op == "Dropout") {
        current = dropout(n, current);
      } else if (op == "Flatten" || op == "Reshape") {
        current = reshape(n, current, op == "Flatten");
      } else {
        refuse(KILN_ERROR_NOT_SUPPORTED,
               node_name(n) + " is an op kiln does not read; kiln reads Gemm, MatMul (+ Add), Relu, LeakyRelu, "
                              "Gelu, Tanh, Sigmoid, Identity, Dropout, and Flatten or Reshape at the input");
      }
    }
    for (int n = 0; n < g_.node_size(); ++n)
      if (!done_[size_t(n)])
        refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " is not on the chain from the input " + quoted(input_) +
                                             " to the output " + quoted(output_) +
                                             "; kiln reads MLPs whose nodes form one chain");
    bool linear = false;
    for (const OnnxLayer &l : out_.layers) linear = linear || l.kind == KILN_LAYER_LINEAR;
    if (!linear) refuse(KILN_ERROR_NOT_SUPPORTED, "the graph has no Gemm or MatMul: a kiln model needs a Linear");
  }
};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) kiln_status kiln_onnx_import(const char *bytes, int64_t size,
                                                                    kiln::OnnxGraph *graph, char *reason,
                                                                    int64_t reason_size) {
  using kiln::onnx_plugin::refuse;
  try {
    if (size < 0 || size > kiln::onnx_plugin::kMaxFileBytes)
      return refuse(KILN_ERROR_NOT_SUPPORTED, "the file is larger than KILN_ONNX_MAX_FILE_BYTES", reason, reason_size);
    constexpr const char *kUnparsable =
        "the file is not an ONNX model: protobuf cannot parse it (truncated or corrupt)";
    // Counted before protobuf allocates an object for each of its messages.
    const kiln::onnx_plugin::WireCensus census = kiln::onnx_plugin::take_census(bytes, size);
    if (!census.well_formed) return refuse(KILN_ERROR_FORMAT, kUnparsable, reason, reason_size);
    if (census.graph_nodes > KILN_ONNX_MAX_NODES)
      return refuse(KILN_ERROR_NOT_SUPPORTED,
                    "the graph has " + std::to_string(census.graph_nodes) + " nodes, more than KILN_ONNX_MAX_NODES (" +
                        std::to_string(KILN_ONNX_MAX_NODES) + ")",
                    reason, reason_size);
    if (census.parsed_bytes > kiln::onnx_plugin::parse_budget(size))
      return refuse(KILN_ERROR_NOT_SUPPORTED,
                    "the file would take about " + std::to_string(census.parsed_bytes >> 20) +
                        " MiB once parsed, more than kiln allows for a file of " + std::to_string(size) +
                        " bytes (16 MiB + 4 times its size): it holds many more small messages or fields than "
                        "an MLP's file",
                    reason, reason_size);
    onnx::ModelProto model;
    if (!model.ParseFromArray(bytes, int(size))) return refuse(KILN_ERROR_FORMAT, kUnparsable, reason, reason_size);
    if (!model.has_graph()) return refuse(KILN_ERROR_FORMAT, "the file holds no graph", reason, reason_size);
    *graph = Reader(model, size).read();
    return KILN_OK;
  } catch (const Refusal &r) {
    return refuse(r.status, r.message, reason, reason_size);
  } catch (const std::bad_alloc &) {
    return refuse(KILN_ERROR_OUT_OF_MEMORY, "out of host memory while reading the ONNX graph", reason, reason_size);
  } catch (const std::exception &e) {
    return refuse(KILN_ERROR_INTERNAL, e.what(), reason, reason_size);
  }
}

}
