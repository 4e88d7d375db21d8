#include "nn/state_dict_hint.hpp"

#include <algorithm>
#include <tuple>
#include <unordered_map>

#include "core/excerpt.hpp"
#include "nn/spec.hpp"

namespace kiln {

namespace {

constexpr size_t kListed = 8;         // modules named before "and N more"
constexpr size_t kMaxSpecText = 240;  // a longer suggestion is left out

bool ends_with(const std::string &text, const std::string &end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

// A module of the state_dict: the tensors whose names share everything up
// to their last dot ("1.running_mean" -> module "1", tensor "running_mean").
struct Module {
  std::string path;
  std::vector<const io::TensorFile::Entry *> tensors;

  const io::TensorFile::Entry *get(const std::string &tensor) const {
    for (const io::TensorFile::Entry *e : tensors)
      if (e->name.size() == path.size() + (path.empty() ? 0 : 1) + tensor.size() && ends_with(e->name, tensor))
        return e;
    return nullptr;
  }
  bool has_prefix(const std::string &start) const {
    for (const io::TensorFile::Entry *e : tensors)
      if (e->name.compare(path.empty() ? 0 : path.size() + 1, start.size(), start) == 0) return true;
    return false;
  }
};

// What one module is, as PyTorch's layers name their tensors.
struct Reading {
  bool linear = false;
  int64_t in = 0, out = 0;
  bool bias = false;
  std::string text;     // "Linear(784, 32) at 0"
  std::string missing;  // "BatchNorm", "convolutions", ...: what kiln lacks; "" for a Linear
  std::string advice;   // how to save a layer kiln has in a form it reads (with missing set)
};

// torch.nn.utils.parametrize keeps a layer's weight under this module path.
const std::string kParametrized = "parametrizations.weight";

// A Linear of the state_dict: its nn.Sequential index (-1 for another
// name), its module and what it reads as.
struct FoundLinear {
  int64_t at;
  const Module *module;
  Reading r;
};

std::string where(const Module &m) { return m.path.empty() ? " at the top level" : " at " + printable(m.path, 60) + ".*"; }

Reading read_module(const Module &m, bool convolutions) {
  Reading r;
  const io::TensorFile::Entry *weight = m.get("weight"), *bias = m.get("bias");
  const bool only_weight_bias = weight && m.tensors.size() == (bias ? 2u : 1u);
  if (m.get("running_mean") || m.get("running_var")) {
    r.text = std::string(convolutions ? "BatchNorm2d" : "BatchNorm1d") + " running statistics" + where(m);
    r.missing = "BatchNorm";
  } else if (m.has_prefix("weight_ih") || m.has_prefix("weight_hh")) {
    r.text = "a recurrent layer (RNN, LSTM or GRU)" + where(m);
    r.missing = "recurrent layers";
  } else if (m.get("weight_g") && m.get("weight_v")) {
    r.text = "a layer under torch.nn.utils.weight_norm (weight_g, weight_v)" + where(m);
    r.missing = "weight_norm";
    r.advice = "save it after torch.nn.utils.remove_weight_norm(layer)";
  } else if (m.get("weight_orig") && m.get("weight_mask")) {
    r.text = "a pruned layer (weight_orig, weight_mask)" + where(m);
    r.missing = "pruning";
    r.advice = "save it after torch.nn.utils.prune.remove(layer, \"weight\")";
  } else if (m.path == kParametrized || ends_with(m.path, "." + kParametrized)) {
    r.text = "a parametrized weight (weight_norm's or another parametrization's original0, ...)" + where(m);
    r.missing = "parametrizations";
    r.advice = "save it after torch.nn.utils.parametrize.remove_parametrizations(layer, \"weight\")";
  } else if (m.get("in_proj_weight")) {
    r.text = "MultiheadAttention" + where(m);
    r.missing = "attention";
  } else if (only_weight_bias && weight->shape.ndim == 2 &&
             (!bias || (bias->shape.ndim == 1 && bias->shape[0] == weight->shape[0]))) {
    r.linear = true;
    r.in = weight->shape[1];
    r.out = weight->shape[0];
    r.bias = bias != nullptr;
    r.text = "Linear(" + std::to_string(r.in) + ", " + std::to_string(r.out) + (r.bias ? "" : ", bias=False") + ")" +
             (m.path.empty() ? " at the top level" : " at " + printable(m.path, 60));
  } else if (only_weight_bias && weight->shape.ndim >= 3 && weight->shape.ndim <= 5) {
    r.text = "Conv" + std::to_string(weight->shape.ndim - 2) + "d(" + std::to_string(weight->shape[1]) + ", " +
             std::to_string(weight->shape[0]) + ")" + where(m);
    r.missing = "convolutions";
  } else if (only_weight_bias && weight->shape.ndim == 1) {
    r.text = "a LayerNorm (or another normalisation's scale and shift)" + where(m);
    r.missing = "LayerNorm";
  } else if (bias && m.tensors.size() == 1 && bias->shape.ndim == 1) {
    // nn.Linear's weight, tied to another layer's, which
    // safetensors.torch.save_model writes under one name only.
    r.text = "a bias without its weight" + where(m);
    r.missing = "tied weights";
    r.advice =
        "a weight shared with another layer is saved once by safetensors' save_model; "
        "torch.save(model.state_dict(), PATH) keeps every name";
  } else {
    std::string names;
    for (size_t i = 0; i < m.tensors.size() && i < 3; ++i)
      names += (i ? ", " : "") + printable(m.tensors[i]->name.substr(m.path.empty() ? 0 : m.path.size() + 1), 40);
    if (m.tensors.size() > 3) names += ", ...";
    r.text = "tensors of a layer kiln does not know (" + names + ")" + where(m);
    r.missing = "such layer";
  }
  return r;
}

// "<prefix><index>": the index, or -1 for a path of another form.
int64_t sequential_index(const std::string &path, std::string *prefix) {
  const size_t dot = path.rfind('.');
  const std::string last = dot == std::string::npos ? path : path.substr(dot + 1);
  if (last.empty() || last.size() > 9 || !std::all_of(last.begin(), last.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  if (last.size() > 1 && last[0] == '0') return -1;  // nn.Sequential writes "10", never "010"
  *prefix = dot == std::string::npos ? std::string() : path.substr(0, dot + 1);
  return std::stoll(last);
}

// The spec of Linears at these nn.Sequential indices (sorted), with a
// Flatten before an index-1 first Linear and ReLU (and Dropout) in the gaps
// of one (two) indices between them; "" when the gaps or widths do not allow
// one.
std::string fitting_spec(const std::vector<FoundLinear> &linears) {
  if (linears.empty() || linears.front().at > 1) return "";
  ModelSpec spec;
  if (linears.front().at == 1) spec.add_flatten();
  for (size_t i = 0; i < linears.size(); ++i) {
    const Reading &l = linears[i].r;
    if (i > 0) {
      const int64_t gap = linears[i].at - linears[i - 1].at - 1;
      if (gap < 1 || gap > 2 || linears[i - 1].r.out != l.in) return "";
      spec.add(KILN_LAYER_RELU, 0);
      if (gap == 2) spec.add(KILN_LAYER_DROPOUT, 0.5);
    }
    try {
      spec.add_linear(l.in, l.out, l.bias);
    } catch (const Error &) {  // sizes beyond kiln's limits
      return "";
    }
  }
  const std::string text = spec.describe();
  return text.size() <= kMaxSpecText ? text : "";
}

// A module path as a Python expression on `model` ("fc1" -> model.fc1,
// "layers.0" -> model.layers[0]), or "" when a part is neither an index nor
// an identifier.
std::string python_path(const std::string &path) {
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  const auto word = [&](char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || digit(c); };
  std::string out = "model";
  for (size_t start = 0; start <= path.size();) {
    const size_t dot = std::min(path.find('.', start), path.size());
    const std::string part = path.substr(start, dot - start);
    if (part.empty() || part.size() > 60) return "";
    if (std::all_of(part.begin(), part.end(), digit)) out += "[" + part + "]";
    else if (!digit(part[0]) && std::all_of(part.begin(), part.end(), word)) out += "." + part;
    else return "";
    start = dot + 1;
  }
  return out;
}

// The spec of Linears chained in this order with ReLU between, and the
// nn.Sequential of their modules that names them so; {"", ""} when their
// widths do not chain or a path is not Python.
std::pair<std::string, std::string> chained_spec(const std::vector<FoundLinear> &linears) {
  if (linears.empty()) return {};
  ModelSpec spec;
  std::string sequential = "nn.Sequential(";
  for (size_t i = 0; i < linears.size(); ++i) {
    const Reading &l = linears[i].r;
    const std::string module = python_path(linears[i].module->path);
    if (module.empty() || (i > 0 && linears[i - 1].r.out != l.in)) return {};
    if (i > 0) {
      spec.add(KILN_LAYER_RELU, 0);
      sequential += ", nn.ReLU(), ";
    }
    sequential += module;
    try {
      spec.add_linear(l.in, l.out, l.bias);
    } catch (const Error &) {
      return {};
    }
  }
  const std::string text = spec.describe();
  if (text.size() > kMaxSpecText || sequential.size() > kMaxSpecText) return {};
  return {text, sequential + ")"};
}

}  // namespace

StateDictHint read_state_dict_hint(const std::vector<io::TensorFile::Entry> &entries) {
  std::vector<Module> modules;
  std::unordered_map<std::string, size_t> index;
  bool convolutions = false;
  for (const io::TensorFile::Entry &e : entries) {
    const size_t dot = e.name.rfind('.');
    const std::string path = dot == std::string::npos ? std::string() : e.name.substr(0, dot);
    auto it = index.emplace(path, modules.size()).first;
    if (it->second == modules.size()) modules.push_back(Module{path, {}});
    modules[it->second].tensors.push_back(&e);
    convolutions = convolutions || (ends_with(e.name, ".weight") && e.shape.ndim == 4);
  }

  StateDictHint hint;
  bool complete = true;  // every layer one kiln has
  std::vector<FoundLinear> linears;  // in the file's order; by index once sorted
  bool sequential = true;
  std::string common_prefix;
  size_t listed = 0;
  for (size_t i = 0; i < modules.size(); ++i) {
    // A parametrized Linear keeps its bias apart from its weight: the
    // parametrization's own entry says what it is.
    if (index.count(modules[i].path + (modules[i].path.empty() ? "" : ".") + kParametrized) &&
        modules[i].tensors.size() == 1 && modules[i].get("bias")) {
      complete = false;
      continue;
    }
    Reading r = read_module(modules[i], convolutions);
    if (listed++ < kListed)
      hint.layers += (hint.layers.empty() ? "" : "; ") + r.text +
                     (!r.advice.empty()   ? ": " + r.advice
                      : r.missing.empty() ? ""
                                          : ": kiln has no " + r.missing);
    complete = complete && r.missing.empty();
    std::string prefix;
    const int64_t at = sequential_index(modules[i].path, &prefix);
    sequential = sequential && at >= 0 && (i == 0 || prefix == common_prefix);
    common_prefix = prefix;
    if (r.linear) linears.push_back({at, &modules[i], std::move(r)});
  }
  if (listed > kListed) hint.layers += " and " + std::to_string(listed - kListed) + " more";
  if (complete && sequential) {
    std::stable_sort(linears.begin(), linears.end(), [](const auto &a, const auto &b) { return a.at < b.at; });
    hint.spec = fitting_spec(linears);
    if (!hint.spec.empty()) hint.prefix = common_prefix;
  }
  // Linears named otherwise (fc1, fc2; a ModuleList's layers.0, layers.1).
  if (complete && hint.spec.empty()) std::tie(hint.spec, hint.sequential) = chained_spec(linears);
  return hint;
}

std::string StateDictHint::sentences() const {
  if (layers.empty()) return "";
  std::string text = " It holds " + layers + ".";
  if (spec.empty()) return text;
  text += " The spec that fits it is \"" + spec + "\"";
  if (!sequential.empty()) {
    text += " once its Linears, in the file's order, are saved under nn.Sequential's names (torch.save(" + sequential +
            ".state_dict(), PATH))";
  } else if (!prefix.empty()) {
    const std::string module = printable(prefix.substr(0, prefix.size() - 1), 60);
    text += " once its tensors are saved without their prefix \"" + printable(prefix, 60) +
            "\" (torch.save(model." + module + ".state_dict(), PATH))";
  }
  return text + " (ReLU assumed between the Linears: a state_dict holds no activations).";
}

}  // namespace kiln
