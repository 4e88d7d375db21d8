// kiln_onnx_import: an ONNX ModelProto read as a kiln layer list, or refused.
//
// kiln reads MLPs: one graph input, one graph output, and between them one
// chain of nodes, each taking the previous node's output as its data input
// and constants for everything else. The walk follows the values from the
// input to the output rather than the node order, so any topological order
// reads the same; every node must lie on the chain. The exceptions to "each
// value feeds one node" are forms matched whole: GELU's erf form
// (x * 0.5 * (1 + erf(x / sqrt 2)), as torch.onnx.export and kiln write it)
// and Softplus with a threshold (as kiln writes it). A Softmax or LogSoftmax
// ending the chain is the model's output transform.
//
// Constants are initializers, Constant nodes, and what constant folding
// makes of them: Transpose, Reshape, Cast, Unsqueeze, Squeeze and Identity
// of constants are computed here (older exporters write Transpose(W) ->
// MatMul). An initializer may keep its data in a file beside the model
// (external data), which libkiln reads for the plugin (OnnxExternalReader).
//
// Everything the file claims is checked before it is used, so that nothing
// is allocated beyond a small multiple of the file's size and no loop runs
// longer than the file is: the census of its wire format (wire_census.hpp)
// before protobuf parses it, every constant's dimensions and element count
// against the values it holds before anything is decoded or walked, and the
// values decoded in all (folding included) against the file's size and the
// sizes of the external files it reads (a graph that reads one huge
// constant from thousands of nodes is refused, not decoded thousands of
// times).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <new>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <onnx/onnx_pb.h>

#include "core/excerpt.hpp"
#include "core/formulas/activations.hpp"
#include "core/number_text.hpp"
#include "nn/spec.hpp"
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
// and room for the scalars of GELU's form and Dropout that nodes share. Each
// external file the graph reads adds twice its size.
constexpr int64_t decode_budget(int64_t size) { return 2 * size + (int64_t(1) << 20); }

using kiln::onnx_plugin::kMaxFileBytes;
constexpr int32_t kFloat = onnx::TensorProto_DataType_FLOAT;
constexpr int32_t kDouble = onnx::TensorProto_DataType_DOUBLE;
constexpr int32_t kInt64 = onnx::TensorProto_DataType_INT64;
constexpr int32_t kBool = onnx::TensorProto_DataType_BOOL;
// Most nn.Sequential indices that a weight's name may skip (layers the
// exporter left out); a larger skip is not taken from the name.
constexpr int64_t kMaxLeftOut = 16;

// The opset that introduced the form of `op` kiln reads (every other op kiln
// reads has it in every opset kiln reads).
int64_t first_opset(const std::string &op) {
  if (op == "Erf") return 9;
  if (op == "Gelu") return 20;
  return kiln::onnx_plugin::kMinImportOpset;
}

// Constant folding reads these ops of constants.
bool foldable(const std::string &op) {
  return op == "Transpose" || op == "Reshape" || op == "Cast" || op == "Unsqueeze" || op == "Squeeze" ||
         op == "Identity";
}

// A Softplus read from ONNX, which has no threshold, takes PyTorch's
// (kiln::kDefaultSoftplusThreshold): the two differ by less than 2e-9 past it.

class Reader {
 public:
  Reader(const onnx::ModelProto &model, int64_t file_size, const kiln::OnnxExternalReader *external)
      : model_(model), g_(model.graph()), external_(external), decode_left_(decode_budget(file_size)) {}

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
  const kiln::OnnxExternalReader *external_;
  std::unordered_map<std::string, const onnx::TensorProto *> constants_;
  std::deque<onnx::TensorProto> owned_;  // constants made here: folded, or of Constant's value_* attributes
  std::unordered_map<std::string, std::vector<int>> consumers_;
  std::unordered_map<std::string, int> producers_;
  std::unordered_set<std::string> external_files_;  // locations whose size joined the budget
  std::vector<bool> done_;
  std::string input_, output_;
  int64_t opset_ = 0;      // of the ONNX domain
  int32_t elem_ = 0;       // the graph's float type
  int64_t features_ = 0;   // the width of the value at hand (0: not known yet)
  int64_t rank_ = 0;       // the rank of the value at hand (0: not known)
  int64_t modules_ = 0;    // nn.Sequential indices taken so far: layers and Flattens
  int64_t input_flattens_ = 0;  // of them, the Flattens and Reshapes before any layer
  // The graph input's batch when the file fixes it (0: symbolic or absent),
  // as torch.onnx.export writes it without dynamic axes: the batch of the
  // example it traced, often 1.
  int64_t fixed_batch_ = 0;
  int64_t decode_left_;    // values constant() may still decode
  OnnxGraph out_;

  void check_versions() {
    using kiln::onnx_plugin::kMaxImportIr;
    using kiln::onnx_plugin::kMaxImportOpset;
    using kiln::onnx_plugin::kMinImportIr;
    using kiln::onnx_plugin::kMinImportOpset;
    if (model_.ir_version() < kMinImportIr || model_.ir_version() > kMaxImportIr)
      refuse(KILN_ERROR_NOT_SUPPORTED, "the file has ONNX IR version " + std::to_string(model_.ir_version()) +
                                           "; kiln reads IR versions " + std::to_string(kMinImportIr) + " to " +
                                           std::to_string(kMaxImportIr));
    bool found = false;
    for (const onnx::OperatorSetIdProto &o : model_.opset_import()) {
      if (!o.domain().empty() && o.domain() != "ai.onnx") continue;
      found = true;
      opset_ = o.version();
      const std::string range = "kiln reads opsets " + std::to_string(kMinImportOpset) + " to " +
                                std::to_string(kMaxImportOpset);
      if (o.version() < kMinImportOpset)
        refuse(KILN_ERROR_NOT_SUPPORTED,
               "the file uses opset " + std::to_string(o.version()) + " of the ONNX domain; " + range +
                   ": convert it first with onnx.version_converter, e.g. "
                   "onnx.save(onnx.version_converter.convert_version(onnx.load(path), 13), new_path)");
      if (o.version() > kMaxImportOpset)
        refuse(KILN_ERROR_NOT_SUPPORTED, "the file uses opset " + std::to_string(o.version()) +
                                             " of the ONNX domain; " + range);
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
        if (node.output_size() != 1 || node.attribute_size() != 1)
          refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " is not a Constant of one value");
        define(node.output(0), node_name(n));
        constants_[node.output(0)] = &constant_node_value(n);
        done_[size_t(n)] = true;
      }
    }
    fold_constants();
    for (int n = 0; n < g_.node_size(); ++n) {
      if (done_[size_t(n)]) continue;
      const onnx::NodeProto &node = g_.node(n);
      for (const std::string &in : node.input())
        if (!in.empty()) consumers_[in].push_back(n);
      for (const std::string &o : node.output()) {
        define(o, node_name(n));
        if (!o.empty()) producers_[o] = n;
      }
    }
  }

  // The value of Constant node n: its tensor, or one made of value_float(s)
  // or value_int(s) (opset 12).
  const onnx::TensorProto &constant_node_value(int n) {
    const onnx::AttributeProto &a = g_.node(n).attribute(0);
    using A = onnx::AttributeProto;
    if (a.name() == "value" && a.type() == A::TENSOR) return a.t();
    onnx::TensorProto &t = owned_.emplace_back();
    if (a.name() == "value_float" && a.type() == A::FLOAT) {
      t.set_data_type(kFloat);
      t.add_float_data(a.f());
    } else if (a.name() == "value_floats" && a.type() == A::FLOATS) {
      t.set_data_type(kFloat);
      t.add_dims(a.floats_size());
      *t.mutable_float_data() = a.floats();
    } else if (a.name() == "value_int" && a.type() == A::INT) {
      t.set_data_type(kInt64);
      t.add_int64_data(a.i());
    } else if (a.name() == "value_ints" && a.type() == A::INTS) {
      t.set_data_type(kInt64);
      t.add_dims(a.ints_size());
      *t.mutable_int64_data() = a.ints();
    } else {
      refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " holds " + quoted(a.name()) +
                                           "; kiln reads Constants of a tensor, floats or ints");
    }
    return t;
  }

  // Whether node n reads constants only (and something).
  bool reads_constants(int n) const {
    const onnx::NodeProto &node = g_.node(n);
    if (node.input_size() == 0 || node.input(0).empty()) return false;
    for (const std::string &in : node.input())
      if (!in.empty() && !constants_.count(in)) return false;
    return true;
  }

  // Folds every foldable node whose inputs are constants, and those its
  // results make so, once each: a worklist, not passes over the graph.
  void fold_constants() {
    std::unordered_map<std::string, std::vector<int>> waiting;  // value -> foldable nodes reading it
    std::vector<int> ready;
    for (int n = 0; n < g_.node_size(); ++n) {
      if (done_[size_t(n)] || !foldable(g_.node(n).op_type())) continue;
      for (const std::string &in : g_.node(n).input()) waiting[in].push_back(n);
      if (reads_constants(n)) ready.push_back(n);
    }
    while (!ready.empty()) {
      const int n = ready.back();
      ready.pop_back();
      if (done_[size_t(n)]) continue;
      fold(n);
      done_[size_t(n)] = true;
      auto it = waiting.find(g_.node(n).output(0));
      if (it == waiting.end()) continue;
      for (int m : it->second)
        if (!done_[size_t(m)] && reads_constants(m)) ready.push_back(m);
    }
  }

  void inputs(int n, int min_inputs, int max_inputs) const {
    const onnx::NodeProto &node = g_.node(n);
    if (node.input_size() < min_inputs || node.input_size() > max_inputs)
      refuse(KILN_ERROR_FORMAT, node_name(n) + " has " + std::to_string(node.input_size()) + " inputs, " +
                                    node.op_type() + " takes " + std::to_string(min_inputs) + " to " +
                                    std::to_string(max_inputs));
  }

  // Computes foldable node n (reads_constants) into a constant.
  void fold(int n) {
    const onnx::NodeProto &node = g_.node(n);
    const std::string &op = node.op_type();
    if (node.output_size() != 1 || node.output(0).empty())
      refuse(KILN_ERROR_FORMAT, node_name(n) + " must have one output");
    const std::string &out = node.output(0);
    define(out, node_name(n));
    if (op == "Identity") {
      allow_attributes(n, {});
      inputs(n, 1, 1);
      constants_[out] = constants_.at(node.input(0));
      return;
    }
    Values v;
    if (op == "Transpose") {
      allow_attributes(n, {"perm"});
      inputs(n, 1, 1);
      v = transposed(n, constant(n, node.input(0)));
    } else if (op == "Reshape") {
      allow_attributes(n, {"allowzero"});
      inputs(n, 2, 2);
      v = constant(n, node.input(0));
      v.dims = reshaped(n, v, constant(n, node.input(1)));
    } else if (op == "Cast") {
      allow_attributes(n, {"to", "saturate", "round_mode"});
      inputs(n, 1, 1);
      v = cast(n, constant(n, node.input(0)));
    } else {
      v = constant(n, node.input(0));
      v.dims = squeezed(n, v, op == "Unsqueeze");
    }
    constants_[out] = &own(v);
  }

  // A constant made here, holding v as raw data.
  const onnx::TensorProto &own(const Values &v) {
    onnx::TensorProto &t = owned_.emplace_back();
    t.set_data_type(v.type);
    for (int64_t d : v.dims) t.add_dims(d);
    std::string &raw = *t.mutable_raw_data();
    if (v.type == kFloat) {
      raw.resize(v.f.size() * sizeof(float));
      for (size_t k = 0; k < v.f.size(); ++k) {
        const float x = float(v.f[k]);
        std::memcpy(&raw[k * sizeof x], &x, sizeof x);
      }
    } else if (v.type == kDouble) {
      raw.assign(reinterpret_cast<const char *>(v.f.data()), v.f.size() * sizeof(double));
    } else if (v.type == kInt64) {
      raw.assign(reinterpret_cast<const char *>(v.i.data()), v.i.size() * sizeof(int64_t));
    } else {  // BOOL
      for (int64_t x : v.i) raw.push_back(char(x != 0));
    }
    return t;
  }

  // The integers of attribute `name` of node n (INTS), or null when absent.
  const onnx::AttributeProto *ints_attribute(int n, const char *name) const {
    const onnx::AttributeProto *a = attribute(n, name);
    if (a && a->type() != onnx::AttributeProto_AttributeType_INTS)
      refuse(KILN_ERROR_FORMAT, node_name(n) + ": attribute \"" + name + "\" is not a list of integers");
    return a;
  }

  // Transpose by the "perm" attribute (default: the dimensions reversed).
  Values transposed(int n, const Values &v) const {
    const size_t r = v.dims.size();
    std::vector<int64_t> perm(r);
    for (size_t k = 0; k < r; ++k) perm[k] = int64_t(r - 1 - k);
    if (const onnx::AttributeProto *a = ints_attribute(n, "perm")) {
      if (size_t(a->ints_size()) != r)
        refuse(KILN_ERROR_FORMAT, node_name(n) + " permutes " + std::to_string(a->ints_size()) +
                                      " dimensions of a constant of " + std::to_string(r));
      std::vector<bool> seen(r, false);
      for (size_t k = 0; k < r; ++k) {
        const int64_t p = a->ints(int(k));
        if (p < 0 || p >= int64_t(r) || seen[size_t(p)])
          refuse(KILN_ERROR_FORMAT, node_name(n) + "'s perm is not a permutation of the constant's dimensions");
        seen[size_t(p)] = true;
        perm[k] = p;
      }
    }
    Values t = v;
    std::vector<int64_t> stride(r, 1), index(r, 0);
    for (size_t k = r; k-- > 1;) stride[k - 1] = stride[k] * v.dims[k];
    for (size_t k = 0; k < r; ++k) t.dims[k] = v.dims[size_t(perm[k])];
    // Output elements in order, their source found by an odometer over t.dims.
    int64_t source = 0;
    for (int64_t e = 0; e < v.count; ++e) {
      if (!v.f.empty()) t.f[size_t(e)] = v.f[size_t(source)];
      else t.i[size_t(e)] = v.i[size_t(source)];
      for (size_t k = r; k-- > 0;) {
        const int64_t step = stride[size_t(perm[k])];
        if (++index[k] < t.dims[k]) {
          source += step;
          break;
        }
        source -= step * (index[k] - 1);
        index[k] = 0;
      }
    }
    return t;
  }

  // The dimensions Reshape gives v, by the INT64 shape constant `shape`.
  std::vector<int64_t> reshaped(int n, const Values &v, const Values &shape) const {
    if (shape.type != kInt64 || shape.dims.size() != 1)
      refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + "'s shape is not a 1-D INT64 constant");
    const bool allowzero = int_attribute(n, "allowzero", 0) != 0;
    std::vector<int64_t> dims;
    int64_t known = 1, inferred = -1;
    for (size_t k = 0; k < shape.i.size(); ++k) {
      int64_t d = shape.i[k];
      if (d == 0 && !allowzero) {
        if (k >= v.dims.size())
          refuse(KILN_ERROR_FORMAT, node_name(n) + " copies dimension " + std::to_string(k) + " of a constant of " +
                                        std::to_string(v.dims.size()));
        d = v.dims[k];
      }
      if (d == -1) {
        if (inferred >= 0) refuse(KILN_ERROR_FORMAT, node_name(n) + "'s shape has two -1");
        inferred = int64_t(k);
        dims.push_back(1);
        continue;
      }
      if (d < 0 || d > kMaxFileBytes || (d > 0 && known > kMaxFileBytes / d))
        refuse(KILN_ERROR_FORMAT, node_name(n) + " reshapes to " + dims_text(shape.i));
      known *= d;
      dims.push_back(d);
    }
    if (inferred >= 0) {
      if (known == 0 || v.count % known)
        refuse(KILN_ERROR_FORMAT, node_name(n) + " reshapes " + dims_text(v.dims) + " to " + dims_text(shape.i));
      dims[size_t(inferred)] = v.count / known;
    } else if (known != v.count) {
      refuse(KILN_ERROR_FORMAT, node_name(n) + " reshapes " + dims_text(v.dims) + " to " + dims_text(shape.i));
    }
    return dims;
  }

  // v as the "to" type of Cast node n: FLOAT, DOUBLE or INT64.
  Values cast(int n, Values v) const {
    const int64_t to = int_attribute(n, "to", -1);
    if (to != kFloat && to != kDouble && to != kInt64)
      refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " casts to " + type_name(int32_t(to)) +
                                           "; kiln folds Casts to FLOAT, DOUBLE and INT64");
    const bool from_int = v.type == kInt64 || v.type == kBool;
    if (to == kInt64 && !from_int) {
      for (double x : v.f) {
        if (!(std::fabs(x) < 9.2e18))
          refuse(KILN_ERROR_FORMAT, node_name(n) + " casts a value out of INT64's range");
        v.i.push_back(int64_t(x));
      }
      v.f.clear();
    } else if (to != kInt64 && from_int) {
      for (int64_t x : v.i) v.f.push_back(to == kFloat ? double(float(x)) : double(x));
      v.i.clear();
    } else if (to == kFloat) {
      for (double &x : v.f) x = double(float(x));
    }
    v.type = int32_t(to);
    return v;
  }

  // The dimensions Unsqueeze (unsqueeze) or Squeeze gives v: its axes from
  // the attribute before opset 13, from the second input since.
  std::vector<int64_t> squeezed(int n, const Values &v, bool unsqueeze) {
    const onnx::NodeProto &node = g_.node(n);
    std::vector<int64_t> axes;
    bool given = false;
    if (opset_ < 13) {
      allow_attributes(n, {"axes"});
      inputs(n, 1, 1);
      if (const onnx::AttributeProto *a = ints_attribute(n, "axes")) {
        axes.assign(a->ints().begin(), a->ints().end());
        given = true;
      }
    } else {
      allow_attributes(n, {});
      inputs(n, 1, 2);
      if (node.input_size() == 2 && !node.input(1).empty()) {
        const Values a = constant(n, node.input(1));
        if (a.type != kInt64 || a.dims.size() > 1)
          refuse(KILN_ERROR_FORMAT, node_name(n) + "'s axes are not a 1-D INT64 constant");
        axes = a.i;
        given = true;
      }
    }
    const int64_t rank = int64_t(v.dims.size()) + (unsqueeze ? int64_t(axes.size()) : 0);
    std::vector<bool> at(size_t(rank), false);
    for (int64_t a : axes) {
      const int64_t k = a < 0 ? a + rank : a;
      if (k < 0 || k >= rank || at[size_t(k)])
        refuse(KILN_ERROR_FORMAT, node_name(n) + " has axes " + dims_text(axes) + " for a result of rank " +
                                      std::to_string(rank));
      at[size_t(k)] = true;
    }
    std::vector<int64_t> dims;
    if (unsqueeze) {
      if (!given) refuse(KILN_ERROR_FORMAT, node_name(n) + " has no axes");
      for (int64_t k = 0, next = 0; k < rank; ++k) dims.push_back(at[size_t(k)] ? 1 : v.dims[size_t(next++)]);
      return dims;
    }
    for (size_t k = 0; k < v.dims.size(); ++k) {
      if (given && at[k] && v.dims[k] != 1)
        refuse(KILN_ERROR_FORMAT, node_name(n) + " squeezes dimension " + std::to_string(k) + " of size " +
                                      std::to_string(v.dims[k]));
      if (given ? !at[k] : v.dims[k] != 1) dims.push_back(v.dims[k]);
    }
    return dims;
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
        rank_ = shape.dim_size();
        if (shape.dim_size() < 2)
          refuse(KILN_ERROR_NOT_SUPPORTED, "the graph input " + quoted(v.name()) + " has " +
                                               std::to_string(shape.dim_size()) +
                                               " dimensions; kiln reads [batch, features...]");
        if (shape.dim(0).has_dim_value() && shape.dim(0).dim_value() > 0) fixed_batch_ = shape.dim(0).dim_value();
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

  // The constant `name` of node n, checked (shape_of) and decoded; its
  // bytes read from a file beside the model when it keeps them there.
  Values constant(int n, const std::string &name) {
    const onnx::TensorProto &t = constant_proto(n, name);
    const std::string what = node_name(n) + ": constant " + quoted(name);
    const bool outside = t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL;
    if (!outside && t.external_data_size() > 0)
      refuse(KILN_ERROR_FORMAT, what + " has external_data but its data_location is not EXTERNAL");
    if (t.has_segment()) refuse(KILN_ERROR_NOT_SUPPORTED, what + " is a segment of a tensor");
    Values v = shape_of(n, name);
    // The values it holds, in raw bytes (width bytes each), in the typed
    // field or in the external file, must be as many as its shape says.
    std::string external;
    const std::string &raw = *(outside ? &external : &t.raw_data());
    const bool in_raw = outside || t.has_raw_data();
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
    kiln::OnnxExternalRef ref;
    if (outside) {
      if (t.has_raw_data() || typed) refuse(KILN_ERROR_FORMAT, what + " is EXTERNAL but holds data of its own too");
      ref = external_ref(what, t, v, width);
    }
    const int64_t held =
        outside ? v.count : in_raw ? (int64_t(raw.size()) % width ? -1 : int64_t(raw.size()) / width) : typed;
    if (held != v.count)
      refuse(KILN_ERROR_FORMAT, what + " has shape " + dims_text(v.dims) + " (" + std::to_string(v.count) +
                                    " elements) but holds " + std::to_string(held) +
                                    (in_raw ? " elements of raw data" : " values"));
    if (v.count > decode_left_)
      refuse(KILN_ERROR_NOT_SUPPORTED, what + " would take the values the graph's nodes read from constants past " +
                                           "twice the size of the files: kiln reads graphs whose nodes share few "
                                           "constants");
    decode_left_ -= v.count;
    if (outside) {
      char reason[512] = {};
      const kiln_status status = external_->read(external_->user, ref, &external, reason, sizeof reason);
      if (status != KILN_OK) refuse(status, what + ": " + reason);
      if (int64_t(external.size()) != ref.bytes)
        refuse(KILN_ERROR_INTERNAL, what + ": the external data reader returned another size");
    }
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

  // A byte count or offset of external_data: decimal digits that fit.
  int64_t byte_count(const std::string &what, const std::string &key, const std::string &text) const {
    int64_t v = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || text[0] == '-' || error != std::errc() || end != text.data() + text.size())
      refuse(KILN_ERROR_FORMAT, what + "'s external data has " + key + " " + quoted(text) +
                                    ", which is not a byte count");
    return v;
  }

  // Where constant t (v's shape, `width` bytes an element) keeps its data,
  // checked against what its shape needs; the file's size joins the budget
  // the first time it is named.
  kiln::OnnxExternalRef external_ref(const std::string &what, const onnx::TensorProto &t, const Values &v,
                                     int64_t width) {
    if (!external_ || !external_->read || !external_->file_size)
      refuse(KILN_ERROR_NOT_SUPPORTED, what + " keeps its data in an external file, which this reader cannot open");
    kiln::OnnxExternalRef ref;
    ref.bytes = v.count * width;  // v.count <= kMaxFileBytes: no overflow
    int64_t length = -1;
    bool located = false;
    for (const onnx::StringStringEntryProto &e : t.external_data()) {
      if (e.key() == "location") {
        ref.location = e.value();
        located = true;
      } else if (e.key() == "offset") {
        ref.offset = byte_count(what, "offset", e.value());
      } else if (e.key() == "length") {
        length = byte_count(what, "length", e.value());
      } else if (e.key() == "checksum") {
        ref.checksum = e.value();
      } else {
        refuse(KILN_ERROR_NOT_SUPPORTED, what + "'s external data has the key " + quoted(e.key()) +
                                             "; kiln reads location, offset, length and checksum");
      }
    }
    if (!located || ref.location.empty())
      refuse(KILN_ERROR_FORMAT, what + " keeps its data in an external file but names none");
    if (length >= 0 && length != ref.bytes)
      refuse(KILN_ERROR_FORMAT, what + " has shape " + dims_text(v.dims) + " (" + std::to_string(ref.bytes) +
                                    " bytes) but its external data is " + std::to_string(length) + " bytes long");
    if (external_files_.insert(ref.location).second) {
      int64_t bytes = 0;
      char reason[512] = {};
      const kiln_status status = external_->file_size(external_->user, ref.location, &bytes, reason, sizeof reason);
      if (status != KILN_OK) refuse(status, what + ": " + reason);
      decode_left_ += 2 * std::min<int64_t>(bytes, int64_t(1) << 50);  // no file is larger
    }
    return ref;
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

  // Whether `name` is a constant float scalar ([] or [1]), and its value:
  // a FLOAT's as the shortest decimal that reads back as it (what its
  // writer meant, as float_attribute). Decodes only a constant of one element.
  bool scalar_value(int n, const std::string &name, double *value) {
    if (!constants_.count(name) || shape_of(n, name).count != 1) return false;
    const Values v = constant(n, name);
    if (v.f.size() != 1 || v.dims.size() > 1) return false;
    *value = v.type == kFloat ? shortest(float(v.f[0])) : v.f[0];
    return true;
  }

  // Whether `name` is a constant scalar of value want.
  bool is_scalar(int n, const std::string &name, double want) {
    double v = 0;
    return scalar_value(n, name, &v) && std::fabs(v - want) <= 1e-6 * std::fabs(want);
  }

  // The shortest decimal that reads back as f, as a double: ONNX attributes
  // and FLOAT constants are float32, so 0.1 arrives as 0.100000001490116,
  // and the writer meant 0.1 (which keeps a model's description,
  // leaky_relu(0.1), as written).
  static double shortest(float f) {
    char text[32];
    *std::to_chars(text, text + sizeof text - 1, f).ptr = '\0';
    return std::strtod(text, nullptr);
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
    return shortest(a->f());
  }

  // Node n must read the value at hand as its first input and nothing else
  // but constants from inputs 1..max_inputs-1; returns its data output.
  const std::string &take(int n, const std::string &current, int min_inputs, int max_inputs) {
    const onnx::NodeProto &node = g_.node(n);
    inputs(n, min_inputs, max_inputs);
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
    const int64_t since = first_opset(g_.node(n).op_type());
    if (opset_ < since)
      refuse(KILN_ERROR_FORMAT, node_name(n) + " needs opset " + std::to_string(since) +
                                    " or later, but the file imports opset " + std::to_string(opset_));
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
    follow_weight_name(g_.node(n).input(1));
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
    l.module = modules_++;
    out_.layers.push_back(std::move(l));
    features_ = out;
  }

  // The nn.Sequential index that a Linear's weight named as PyTorch names
  // it ("3.weight", "linear_relu_stack.3.weight") gives it, where that
  // keeps the indices in order: an exporter leaves out the layers that do
  // nothing in inference (torch.onnx.export drops nn.Dropout in eval mode),
  // whose indices are then Flattens here, which compute nothing either; and
  // a Flatten at the input that the name shows was outside the
  // nn.Sequential (PyTorch's quickstart flattens in forward(), before its
  // linear_relu_stack) takes no index. So the imported parameters keep the
  // names of the nn.Sequential's state_dict, without the prefix before its
  // index (kiln's model is one nn.Sequential).
  void follow_weight_name(const std::string &name) {
    static const std::string suffix = ".weight";
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return;
    const std::string stem = name.substr(0, name.size() - suffix.size());
    const std::string digits = stem.substr(stem.find_last_of('.') + 1);  // npos + 1 == 0: all of it
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return;
    const int64_t index = std::stoll(digits);
    if (index > modules_ && index - modules_ <= kMaxLeftOut) {
      modules_ = index;
    } else if (index < modules_ && out_.layers.empty() && modules_ - index <= input_flattens_) {
      input_flattens_ -= modules_ - index;
      modules_ = index;
    }
  }

  bool has_linear() const {
    for (const OnnxLayer &l : out_.layers)
      if (l.kind == KILN_LAYER_LINEAR) return true;
    return false;
  }

  void add_layer(int n, kiln_layer_kind kind, double arg = 0, double arg2 = 0) {
    OnnxLayer l;
    l.kind = kind;
    l.arg = arg;
    l.arg2 = arg2;
    l.node = node_name(n);
    l.module = modules_++;
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
    rank_ = 2;
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
      // The graph drops values at random wherever it runs; a kiln Dropout
      // does only while training, and predict is the graph's inference.
      if (mode.i[0] != 0 && p > 0)
        refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) +
                                             " has training_mode true: it drops values at random in "
                                             "inference, which kiln's Dropout does only while training (export the "
                                             "model after model.eval())");
    }
    if (!(p >= 0 && p < 1))
      refuse(KILN_ERROR_FORMAT, node_name(n) + " has ratio " + kiln::number_text(p) + "; kiln's Dropout takes [0, 1)");
    add_layer(n, KILN_LAYER_DROPOUT, p);
    return result;
  }

  // Flatten or Reshape to [batch, features] before any layer, or a Flatten
  // after one that changes nothing in kiln's [batch, features]: an
  // nn.Flatten(), which takes an index of nn.Sequential and so names the
  // parameters after it as PyTorch does (1.weight behind a Flatten).
  // torch.onnx.export writes nn.Flatten() as Flatten (TorchScript) or as
  // Reshape (torch.export).
  std::string reshape(int n, const std::string &current, bool flatten) {
    if (!out_.layers.empty() && !flatten)
      refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " comes after the first layer; kiln reads Reshape only at "
                                                      "the input");
    if (flatten) {
      allow_attributes(n, {"axis"});
      const std::string &result = take(n, current, 1, 1);
      if (int_attribute(n, "axis", 1) != 1)
        refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " flattens at another axis than 1");
      // Before the first Linear the layers work element by element, on
      // kiln's [batch, features] as on any shape; after it only a value of
      // rank 2 is already flat.
      if (has_linear() && rank_ != 2)
        refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " flattens a value of " +
                                             (rank_ ? "rank " + std::to_string(rank_) : std::string("unknown rank")) +
                                             " after a Linear; kiln reads a Flatten there only of [batch, features]");
      rank_ = 2;
      if (out_.layers.empty()) ++input_flattens_;
      ++modules_;
      return result;
    }
    allow_attributes(n, {"allowzero"});
    const std::string &result = take(n, current, 2, 2);
    const Values shape = constant(n, g_.node(n).input(1));
    if (shape.type != onnx::TensorProto_DataType_INT64 || shape.count != 2)
      refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " reshapes to " + std::to_string(shape.count) +
                                           " dimensions; kiln reads a Reshape to [batch, features]");
    return flatten_rows(n, result, shape.i[0], shape.i[1], int_attribute(n, "allowzero", 0) == 0);
  }

  // Reshape node n, whose output is result, at the input to [batch, width]
  // (-1 or, unless allowzero, 0: the input's own batch).
  const std::string &flatten_rows(int n, const std::string &result, int64_t batch, int64_t width, bool zero_copies) {
    // A batch written out is the input's fixed one: the Reshape flattens
    // each sample of the traced batch, and kiln's model then takes any.
    const bool batch_kept =
        batch == -1 || (batch == 0 && zero_copies) || (batch > 0 && fixed_batch_ > 0 && batch == fixed_batch_);
    if (!batch_kept || width == 0 || width < -1 || (width == -1 && (batch == -1 || !features_)))
      refuse(KILN_ERROR_NOT_SUPPORTED,
             node_name(n) + " reshapes to [" + std::to_string(batch) + ", " + std::to_string(width) +
                 "]; kiln reads [-1, features], [0, features] or, where the graph's input fixes its batch, "
                 "[batch, features]" +
                 (fixed_batch_ > 0 ? " (here " + std::to_string(fixed_batch_) + ")" : ""));
    if (width > 0) {
      if (features_ && width != features_)
        refuse(KILN_ERROR_FORMAT, node_name(n) + " reshapes rows of " + std::to_string(features_) + " features to " +
                                      std::to_string(width));
      features_ = width;
      out_.input_features = width;
    }
    rank_ = 2;
    ++input_flattens_;
    ++modules_;
    return result;
  }

  // A Reshape of the input to [its own batch, width], as the TorchScript
  // exporter writes x.view(x.size(0), -1) where the batch is dynamic: the
  // batch comes from Shape(x) -> Gather(0) -> Unsqueeze(0) -> Concat(axis 0,
  // [width]) -> Reshape(x, that). "" when the nodes are anything else.
  std::string batch_flatten(const std::string &current) {
    const std::vector<int> &u = users(current);
    if (u.size() != 2 || !out_.layers.empty() || current == output_) return "";
    for (int first = 0; first < 2; ++first) {
      const int shape = u[size_t(first)], reshape_node = u[size_t(1 - first)];
      const onnx::NodeProto &sh = g_.node(shape), &r = g_.node(reshape_node);
      if (sh.op_type() != "Shape" || sh.input_size() != 1 || sh.output_size() != 1 ||
          int_attribute(shape, "start", 0) != 0 || r.op_type() != "Reshape" || r.input_size() != 2 ||
          r.input(0) != current)
        continue;
      const int gather = only_user(sh.output(0));
      if (gather < 0 || g_.node(gather).op_type() != "Gather" || g_.node(gather).input_size() != 2 ||
          g_.node(gather).output_size() != 1 || int_attribute(gather, "axis", 0) != 0)
        continue;
      const onnx::NodeProto &ga = g_.node(gather);
      int64_t index = -1;
      if (!int_scalar(gather, ga.input(1), &index) || index != 0) continue;
      std::vector<int> nodes = {shape, gather};
      std::string batch = ga.output(0);
      if (shape_of(gather, ga.input(1)).dims.empty()) {  // a scalar: Unsqueeze makes it [batch]
        const int unsqueeze = only_user(batch);
        if (unsqueeze < 0 || g_.node(unsqueeze).op_type() != "Unsqueeze" || !unsqueezes_at_0(unsqueeze)) continue;
        nodes.push_back(unsqueeze);
        batch = g_.node(unsqueeze).output(0);
      }
      const int concat = only_user(batch);
      if (concat < 0 || g_.node(concat).op_type() != "Concat" || g_.node(concat).input_size() != 2 ||
          g_.node(concat).output_size() != 1 || g_.node(concat).input(0) != batch ||
          int_attribute(concat, "axis", 0) != 0 || only_user(g_.node(concat).output(0)) != reshape_node ||
          r.input(1) != g_.node(concat).output(0))
        continue;
      nodes.push_back(concat);
      int64_t width = 0;
      if (!int_scalar(concat, g_.node(concat).input(1), &width)) continue;
      for (int node : nodes) visit(node);
      allow_attributes(reshape_node, {"allowzero"});
      if (r.output_size() != 1 || r.output(0).empty())
        refuse(KILN_ERROR_FORMAT, node_name(reshape_node) + " has no output");
      visit(reshape_node);
      return flatten_rows(reshape_node, r.output(0), 0, width, true);  // 0: the input's batch
    }
    return "";
  }

  // Whether Unsqueeze node n inserts axis 0 alone (an attribute before
  // opset 13, an input from it).
  bool unsqueezes_at_0(int n) {
    const onnx::NodeProto &node = g_.node(n);
    if (node.output_size() != 1) return false;
    if (node.input_size() == 1) {
      const onnx::AttributeProto *axes = attribute(n, "axes");
      return axes && node.attribute_size() == 1 && axes->ints_size() == 1 && axes->ints(0) == 0;
    }
    int64_t axis = -1;
    return node.input_size() == 2 && node.attribute_size() == 0 && int_scalar(n, node.input(1), &axis) && axis == 0;
  }

  // Whether `name` is a constant INT64 of one element ([] or [1]), and its
  // value.
  bool int_scalar(int n, const std::string &name, int64_t *value) {
    if (!constants_.count(name) || shape_of(n, name).count != 1) return false;
    const Values v = constant(n, name);
    if (v.type != onnx::TensorProto_DataType_INT64) return false;
    *value = v.i[0];
    return true;
  }

  // What a fork the chain cannot read computes, when it is an activation
  // kiln lacks written out in elementary ops: SiLU (x * Sigmoid(x)) and
  // GELU's tanh approximation (0.044715 x^3 inside a Tanh); "" otherwise.
  std::string fork_layer(const std::string &current) {
    const std::vector<int> &u = users(current);
    for (int n : u) {
      const onnx::NodeProto &node = g_.node(n);
      if (node.op_type() != "Sigmoid" || node.output_size() != 1) continue;
      const int mul = only_user(node.output(0));
      if (mul >= 0 && g_.node(mul).op_type() == "Mul" &&
          std::count(g_.node(mul).input().begin(), g_.node(mul).input().end(), current) == 1)
        return "SiLU (x * sigmoid(x), nn.SiLU), an activation kiln does not have";
    }
    // Breadth first over a few nodes past the fork, as far as the Tanh.
    std::vector<int> seen(u.begin(), u.end());
    bool tanh = false, cube = false;
    for (size_t k = 0; k < seen.size() && k < 16; ++k) {
      const onnx::NodeProto &node = g_.node(seen[k]);
      tanh = tanh || node.op_type() == "Tanh";
      if (node.op_type() == "Mul" || node.op_type() == "Pow")
        for (const std::string &in : node.input())
          cube = cube || is_scalar(seen[k], in, 0.044715) || is_scalar(seen[k], in, 3.0);
      for (const std::string &o : node.output())
        for (int next : users(o))
          if (std::find(seen.begin(), seen.end(), next) == seen.end()) seen.push_back(next);
    }
    if (tanh && cube)
      return "GELU's tanh approximation (nn.GELU(approximate=\"tanh\")) written out in elementary ops; kiln's GELU "
             "is the exact (erf) one";
    return "";
  }

  // GELU's erf form from `current`, which feeds exactly the nodes of
  // users(current): Div(x, sqrt 2) -> Erf -> Add 1 -> Mul(x, .) -> Mul 0.5,
  // or with the products the other way round (Mul 0.5 -> Mul(x, .)).
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
      if (!is_scalar(add, one, 1.0)) continue;
      // The two products in either order: x * sum, then * 0.5 (kiln's and
      // TorchScript's export), or 0.5 * sum, then x * (torch.export's).
      const int next = only_user(a.output(0));
      if (next < 0 || !plain(next, "Mul", 2)) continue;
      const onnx::NodeProto &n1 = g_.node(next);
      const std::string &other = n1.input(0) == a.output(0) ? n1.input(1) : n1.input(0);
      const bool x_first = other == current && next == mul;
      if (!x_first && !is_scalar(next, other, 0.5)) continue;
      const int half = x_first ? only_user(n1.output(0)) : mul;
      if (half < 0 || !plain(half, "Mul", 2) || (!x_first && only_user(n1.output(0)) != mul)) continue;
      const onnx::NodeProto &h = g_.node(half);
      const std::string &c = h.input(0) == n1.output(0) ? h.input(1) : h.input(0);
      if (!(x_first ? is_scalar(half, c, 0.5) : c == current)) continue;
      for (int node : {div, erf, add, next, half}) {
        allow_attributes(node, {});
        visit(node);
      }
      add_layer(div, KILN_LAYER_GELU);
      return h.output(0);
    }
    return "";
  }

  // Softplus(beta) from Mul node n: Mul(x, beta) -> Softplus -> Div(beta),
  // as torch.onnx.export writes nn.Softplus(beta) (with PyTorch's threshold
  // 20: the export does not write it). "" when the nodes are anything else.
  std::string softplus_scaled(int n, const std::string &current) {
    const onnx::NodeProto &m = g_.node(n);
    if (m.input_size() != 2 || m.output_size() != 1 || m.attribute_size() != 0) return "";
    const std::string &b = m.input(0) == current ? m.input(1) : m.input(0);
    double beta = 0;
    if (b == current || !scalar_value(n, b, &beta) || beta == 0) return "";
    const int sp = only_user(m.output(0));
    if (sp < 0 || !softplus_node(sp)) return "";
    const int div = only_user(g_.node(sp).output(0));
    if (div < 0 || !divides_by(div, g_.node(sp).output(0), beta)) return "";
    for (int node : {n, sp, div}) visit(node);
    add_layer(n, KILN_LAYER_SOFTPLUS, beta, kiln::kDefaultSoftplusThreshold);
    return g_.node(div).output(0);
  }

  bool softplus_node(int n) const {
    const onnx::NodeProto &sp = g_.node(n);
    return sp.op_type() == "Softplus" && sp.input_size() == 1 && sp.output_size() == 1 && sp.attribute_size() == 0;
  }

  // Whether node n is Div(numerator, a scalar constant equal to value).
  bool divides_by(int n, const std::string &numerator, double value) {
    const onnx::NodeProto &d = g_.node(n);
    return d.op_type() == "Div" && d.input_size() == 2 && d.output_size() == 1 && d.attribute_size() == 0 &&
           d.input(0) == numerator && is_scalar(n, d.input(1), value);
  }

  // The node that writes `value`, or -1 (a constant, the input).
  int producer(const std::string &value) const {
    auto it = producers_.find(value);
    return it == producers_.end() ? -1 : it->second;
  }

  // Whether exactly `nodes` read `value` (which is not the graph's output).
  bool read_only_by(const std::string &value, std::vector<int> nodes) const {
    std::vector<int> u = users(value);
    std::sort(u.begin(), u.end());
    std::sort(nodes.begin(), nodes.end());
    return value != output_ && u == nodes;
  }

  bool plain(int n, const char *op, int inputs) const {
    const onnx::NodeProto &node = g_.node(n);
    return node.op_type() == op && node.input_size() == inputs && node.output_size() == 1 &&
           node.attribute_size() == 0;
  }

  // Softplus(beta, threshold) with PyTorch's threshold written out, as
  // kiln and PyTorch's torch.export-based exporter write it, from `current`:
  //   s = Mul(x, beta) (or x itself for beta 1); c = Div(Softplus(s), beta)
  //   (or Softplus(s)); y = Where(Greater(s, threshold), x, c).
  // Returns y, or "" when the nodes around `current` are anything else.
  std::string softplus_where(const std::string &current) {
    int where = -1;
    for (int n : users(current))
      if (plain(n, "Where", 3) && g_.node(n).input(1) == current) where = n;
    if (where < 0) return "";
    const onnx::NodeProto &w = g_.node(where);
    const int gt = producer(w.input(0)), curve = producer(w.input(2));
    double threshold = 0, beta = 1;
    if (gt < 0 || curve < 0 || !plain(gt, "Greater", 2) || !scalar_value(gt, g_.node(gt).input(1), &threshold))
      return "";
    const std::string &scaled = g_.node(gt).input(0);
    std::vector<int> form = {gt, where};
    int sp = curve;
    if (plain(curve, "Div", 2)) {  // beta != 1: Mul before, Div after
      const int mul = producer(scaled);
      if (mul < 0 || !plain(mul, "Mul", 2) || !scalar_value(curve, g_.node(curve).input(1), &beta) || beta == 0)
        return "";
      const onnx::NodeProto &m = g_.node(mul);
      const std::string &b = m.input(0) == current ? m.input(1) : m.input(0);
      sp = producer(g_.node(curve).input(0));
      if (b == current || (m.input(0) != current && m.input(1) != current) || !is_scalar(mul, b, beta) || sp < 0 ||
          !read_only_by(current, {mul, where}) || !read_only_by(scaled, {sp, gt}) ||
          !read_only_by(g_.node(sp).output(0), {curve}) || !read_only_by(g_.node(curve).output(0), {where}))
        return "";
      form.insert(form.begin(), {mul, curve});
    } else if (scaled != current || !read_only_by(current, {sp, gt, where}) ||
               !read_only_by(g_.node(sp).output(0), {where})) {
      return "";
    }
    if (!softplus_node(sp) || g_.node(sp).input(0) != scaled || !read_only_by(g_.node(gt).output(0), {where}))
      return "";
    form.push_back(sp);
    for (int node : form) visit(node);
    add_layer(sp, KILN_LAYER_SOFTPLUS, beta, threshold);
    return w.output(0);
  }

  // A Softmax or LogSoftmax ending the chain: the model's output transform,
  // softmax over each sample's features. Before opset 13 the op flattens
  // its input to 2-D at `axis` (default 1), so axis 1 is that at any rank;
  // from opset 13 it works along one axis (default -1), which is each
  // sample's features only for an input of rank 2.
  std::string output_transform(int n, const std::string &current) {
    allow_attributes(n, {"axis"});
    const std::string &result = take(n, current, 1, 1);
    const std::string &op = g_.node(n).op_type();
    if (result != output_ || !users(result).empty())
      refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " is not the graph's last node: kiln reads " + op +
                                           " as a model's output transform, at its end");
    const int64_t axis = int_attribute(n, "axis", opset_ < 13 ? 1 : -1);
    const bool rows = opset_ < 13 ? axis == 1 || (rank_ > 0 && axis == 1 - rank_)
                                  : rank_ == 2 && (axis == 1 || axis == -1);
    if (!rows)
      refuse(KILN_ERROR_NOT_SUPPORTED,
             node_name(n) + " works along axis " + std::to_string(axis) + " of a value of " +
                 (rank_ ? "rank " + std::to_string(rank_) : std::string("unknown rank")) + " (opset " +
                 std::to_string(opset_) + "); kiln's " + op +
                 " is over each sample's features: axis 1 (or -1) of [batch, features]");
    add_layer(n, op == "Softmax" ? KILN_LAYER_SOFTMAX : KILN_LAYER_LOG_SOFTMAX);
    return result;
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
        std::string next = current == output_ ? "" : gelu_erf(current);
        if (next.empty() && current != output_) next = softplus_where(current);
        if (next.empty() && current != output_) next = batch_flatten(current);
        if (next.empty()) {
          const std::string layer = current == output_ ? "" : fork_layer(current);
          refuse(KILN_ERROR_NOT_SUPPORTED,
                 layer.empty() ? not_a_chain(current) : "the nodes after " + quoted(current) + " are " + layer);
        }
        current = next;
        continue;
      }
      const int n = u[0];
      const std::string &op = g_.node(n).op_type();
      if (op == "Gemm") {
        current = gemm(n, current);
      } else if (op == "MatMul") {
        current = matmul(n, current);
      } else if (op == "Relu" || op == "Tanh" || op == "Sigmoid" || op == "Softplus") {
        allow_attributes(n, {});
        current = take(n, current, 1, 1);
        if (op == "Softplus") add_layer(n, KILN_LAYER_SOFTPLUS, kiln::kDefaultSoftplusBeta, kiln::kDefaultSoftplusThreshold);
        else add_layer(n, op == "Relu" ? KILN_LAYER_RELU : op == "Tanh" ? KILN_LAYER_TANH : KILN_LAYER_SIGMOID);
      } else if (op == "LeakyRelu" || op == "Elu") {
        allow_attributes(n, {"alpha"});
        current = take(n, current, 1, 1);
        if (op == "Elu") add_layer(n, KILN_LAYER_ELU, float_attribute(n, "alpha", kiln::kDefaultEluAlpha));
        else add_layer(n, KILN_LAYER_LEAKY_RELU, float_attribute(n, "alpha", kiln::kDefaultLeakySlope));
      } else if (op == "Selu") {
        selu(n);
        current = take(n, current, 1, 1);
        add_layer(n, KILN_LAYER_SELU);
      } else if (op == "Mul") {
        const std::string next = softplus_scaled(n, current);
        if (next.empty()) refuse(KILN_ERROR_NOT_SUPPORTED, not_read(n));
        current = next;
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
      } else if (op == "Softmax" || op == "LogSoftmax") {
        current = output_transform(n, current);
      } else {
        refuse(KILN_ERROR_NOT_SUPPORTED, not_read(n));
      }
    }
    for (int n = 0; n < g_.node_size(); ++n)
      if (!done_[size_t(n)])
        refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " is not on the chain from the input " + quoted(input_) +
                                             " to the output " + quoted(output_) +
                                             "; kiln reads MLPs whose nodes form one chain");
    out_.modules = modules_;
    const bool linear = has_linear();
    if (!linear && !out_.input_features)
      refuse(KILN_ERROR_NOT_SUPPORTED, "the graph has no Gemm or MatMul, and its input " + quoted(input_) +
                                           " does not give the features of a sample (symbolic dimensions): a kiln "
                                           "model without a Linear needs them");
    // Without a weight, nothing in the file bounds the width it claims.
    if (!linear && out_.input_features > kMaxFileBytes)
      refuse(KILN_ERROR_NOT_SUPPORTED, "the graph's input has " + std::to_string(out_.input_features) +
                                           " features a sample, more than a model without a Linear may have (" +
                                           std::to_string(kMaxFileBytes) + ")");
  }

  std::string not_read(int n) const {
    return node_name(n) + " is an op kiln does not read; kiln reads Gemm, MatMul (+ Add), Relu, LeakyRelu, Elu, "
                          "Selu, Softplus, Gelu, Tanh, Sigmoid, Identity, Dropout, Flatten, Reshape at the input, "
                          "Softmax or LogSoftmax at the end, and Transpose, Reshape, Cast, Unsqueeze, Squeeze and "
                          "Identity of constants";
  }

  // Selu node n: ONNX lets alpha and gamma vary; kiln's SELU is PyTorch's,
  // with their defaults (as float32 attributes: within 1e-6).
  void selu(int n) const {
    allow_attributes(n, {"alpha", "gamma"});
    const double alpha = float_attribute(n, "alpha", kiln::formulas::kSeluAlpha);
    const double gamma = float_attribute(n, "gamma", kiln::formulas::kSeluScale);
    if (std::fabs(alpha - kiln::formulas::kSeluAlpha) > 1e-6 || std::fabs(gamma - kiln::formulas::kSeluScale) > 1e-6)
      refuse(KILN_ERROR_NOT_SUPPORTED, node_name(n) + " has alpha " + kiln::number_text(alpha) + " and gamma " +
                                           kiln::number_text(gamma) +
                                           "; kiln's SELU is PyTorch's (alpha 1.6732632, scale 1.0507010)");
  }
};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) kiln_status kiln_onnx_import(const char *bytes, int64_t size,
                                                                    const kiln::OnnxExternalReader *external,
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
    *graph = Reader(model, size, external).read();
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
