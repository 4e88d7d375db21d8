#include "nn/spec.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "core/excerpt.hpp"
#include "core/number_text.hpp"

namespace kiln {

namespace {

std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t pos = s.find(sep, start);
    parts.push_back(trim(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start)));
    if (pos == std::string::npos) return parts;
    start = pos + 1;
  }
}

// Messages quote at most excerpt()'s share of the text: a spec of a megabyte
// must not make a message of a megabyte (issue 12 item 8; found again by
// fuzz_spec through a 500-byte size token quoted next to the spec that held it).
[[noreturn]] void bad_text(const std::string &text, const std::string &why) {
  fail(KILN_ERROR_INVALID_ARGUMENT, "cannot parse model spec \"" + excerpt(text) + "\": " + excerpt(why, 300));
}

int64_t parse_size(const std::string &text, const std::string &token) {
  errno = 0;
  char *end = nullptr;
  long long v = token.empty() ? 0 : std::strtoll(token.c_str(), &end, 10);
  if (token.empty() || *end != '\0' || errno == ERANGE)
    bad_text(text, "\"" + token + "\" is not a layer size");
  if (v < 1) bad_text(text, "layer size " + token + " must be >= 1");
  return int64_t(v);
}

double parse_number(const std::string &text, const std::string &token) {
  char *end = nullptr;
  double v = token.empty() ? 0 : std::strtod(token.c_str(), &end);
  if (token.empty() || *end != '\0' || !std::isfinite(v)) bad_text(text, "\"" + token + "\" is not a number");
  return v;
}

// An activation or output transform name as the text forms spell it; false
// if it is none.
bool named_kind(const std::string &name, kiln_layer_kind *kind) {
  static const kiln_layer_kind kinds[] = {KILN_LAYER_RELU,     KILN_LAYER_LEAKY_RELU, KILN_LAYER_GELU,
                                          KILN_LAYER_TANH,     KILN_LAYER_SIGMOID,    KILN_LAYER_ELU,
                                          KILN_LAYER_SELU,     KILN_LAYER_SOFTPLUS,   KILN_LAYER_SOFTMAX,
                                          KILN_LAYER_LOG_SOFTMAX};
  for (kiln_layer_kind k : kinds)
    if (name == layer_kind_name(k)) {
      *kind = k;
      return true;
    }
  return false;
}

// The parameters `kind` takes in the text forms, and their defaults: at
// most two (Softplus's beta and threshold).
int parameter_count(kiln_layer_kind kind) {
  switch (kind) {
    case KILN_LAYER_LEAKY_RELU: case KILN_LAYER_ELU: case KILN_LAYER_DROPOUT: return 1;
    case KILN_LAYER_SOFTPLUS: return 2;
    default: return 0;
  }
}

LayerSpec with_defaults(kiln_layer_kind kind) {
  LayerSpec l;
  l.kind = kind;
  switch (kind) {
    case KILN_LAYER_LEAKY_RELU: l.arg = kDefaultLeakySlope; break;
    case KILN_LAYER_ELU: l.arg = kDefaultEluAlpha; break;
    case KILN_LAYER_DROPOUT: l.arg = kDefaultDropout; break;
    case KILN_LAYER_SOFTPLUS: l.arg = kDefaultSoftplusBeta, l.arg2 = kDefaultSoftplusThreshold; break;
    default: break;
  }
  return l;
}

// Layer `kind` with the parameters of `values` (the text between the
// parentheses or after '='; empty: the defaults).
LayerSpec parameterised(const std::string &text, const std::string &item, kiln_layer_kind kind,
                        const std::vector<std::string> &values) {
  LayerSpec l = with_defaults(kind);
  const int most = parameter_count(kind);
  if (most == 0 && !values.empty()) bad_text(text, std::string(layer_kind_name(kind)) + " takes no value");
  if (int(values.size()) > most)
    bad_text(text, "\"" + item + "\" takes at most " + std::to_string(most) + (most == 1 ? " value" : " values"));
  if (values.size() > 0) l.arg = parse_number(text, values[0]);
  if (values.size() > 1) l.arg2 = parse_number(text, values[1]);
  return l;
}

// "784-256-10:gelu:dropout=0.2" appended to spec.
void parse_compact(const std::string &text, ModelSpec &spec) {
  std::vector<std::string> parts = split(text, ':');
  std::vector<int64_t> sizes;
  for (const std::string &s : split(parts[0], '-')) sizes.push_back(parse_size(text, s));
  if (sizes.size() < 2) bad_text(text, "it needs at least two sizes, as in \"784-10\"");

  LayerSpec act = with_defaults(KILN_LAYER_RELU);
  double dropout = 0;
  bool have_act = false, have_dropout = false, flatten = false, have_transform = false;
  kiln_layer_kind transform = KILN_LAYER_SOFTMAX;
  for (size_t i = 1; i < parts.size(); ++i) {
    size_t eq = parts[i].find('=');
    std::string name = trim(parts[i].substr(0, eq));
    std::string value = eq == std::string::npos ? std::string() : trim(parts[i].substr(eq + 1));
    kiln_layer_kind kind = KILN_LAYER_LINEAR;
    if (name == "flatten") {
      if (flatten) bad_text(text, "flatten is given twice");
      if (eq != std::string::npos) bad_text(text, "flatten takes no value");
      flatten = true;
    } else if (name == "dropout") {
      if (have_dropout) bad_text(text, "dropout is given twice");
      if (eq == std::string::npos) bad_text(text, "dropout needs a probability, as in \"dropout=0.2\"");
      dropout = parse_number(text, value);
      have_dropout = true;
    } else if (named_kind(name, &kind) && is_output_transform(kind)) {
      if (have_transform) bad_text(text, "more than one output transform (softmax, log_softmax) is given");
      if (eq != std::string::npos) bad_text(text, name + " takes no value");
      transform = kind;
      have_transform = true;
    } else if (named_kind(name, &kind)) {
      if (have_act) bad_text(text, "more than one activation is given");
      if (eq != std::string::npos && value.empty()) bad_text(text, name + "= lacks its value");
      act = parameterised(text, parts[i], kind, eq == std::string::npos ? std::vector<std::string>() : split(value, ','));
      have_act = true;
    } else {
      bad_text(text, "unknown option \"" + parts[i] +
                         "\" (expected relu, gelu, tanh, sigmoid, selu, leaky_relu[=slope], elu[=alpha], "
                         "softplus[=beta[,threshold]], dropout=p, flatten, softmax or log_softmax)");
    }
  }
  if (flatten) spec.add_flatten();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    if (i > 0) {
      spec.add(act.kind, act.arg, act.arg2);
      if (have_dropout) spec.add(KILN_LAYER_DROPOUT, dropout);
    }
    spec.add_linear(sizes[i], sizes[i + 1], true);
  }
  if (have_transform) spec.add(transform, 0);
}

// "linear(784,32);relu;dropout(0.2);linear(32,10,nobias)" appended to spec.
void parse_list(const std::string &text, ModelSpec &spec) {
  for (const std::string &item : split(text, ';')) {
    std::string name = item, args_text;
    bool has_args = false;
    size_t open = item.find('(');
    if (open != std::string::npos) {
      if (item.back() != ')') bad_text(text, "\"" + item + "\" lacks its closing parenthesis");
      name = trim(item.substr(0, open));
      args_text = item.substr(open + 1, item.size() - open - 2);
      has_args = true;
    }
    std::vector<std::string> args = has_args ? split(args_text, ',') : std::vector<std::string>();
    kiln_layer_kind kind = KILN_LAYER_LINEAR;
    if (name == "flatten") {
      if (has_args) bad_text(text, "flatten takes no value (kiln's Flatten is nn.Flatten(): all but the batch)");
      spec.add_flatten();
    } else if (name == "linear") {
      if (args.size() != 2 && !(args.size() == 3 && args[2] == "nobias"))
        bad_text(text, "\"" + item + "\" should be linear(in,out) or linear(in,out,nobias)");
      spec.add_linear(parse_size(text, args[0]), parse_size(text, args[1]), args.size() == 2);
    } else if (name == "input") {
      if (args.size() != 1) bad_text(text, "\"" + item + "\" should be input(FEATURES)");
      spec.add_input(parse_size(text, args[0]));
    } else if (name == "dropout" || named_kind(name, &kind)) {
      if (name == "dropout") kind = KILN_LAYER_DROPOUT;
      const LayerSpec l = parameterised(text, item, kind, args);
      spec.add(l.kind, l.arg, l.arg2);
    } else {
      bad_text(text, "unknown layer \"" + item + "\"");
    }
  }
}

}  // namespace

const char *layer_kind_name(kiln_layer_kind kind) {
  switch (kind) {
    case KILN_LAYER_LINEAR: return "linear";
    case KILN_LAYER_RELU: return "relu";
    case KILN_LAYER_LEAKY_RELU: return "leaky_relu";
    case KILN_LAYER_GELU: return "gelu";
    case KILN_LAYER_TANH: return "tanh";
    case KILN_LAYER_SIGMOID: return "sigmoid";
    case KILN_LAYER_DROPOUT: return "dropout";
    case KILN_LAYER_ELU: return "elu";
    case KILN_LAYER_SELU: return "selu";
    case KILN_LAYER_SOFTPLUS: return "softplus";
    case KILN_LAYER_SOFTMAX: return "softmax";
    case KILN_LAYER_LOG_SOFTMAX: return "log_softmax";
  }
  return "?";
}

bool is_output_transform(kiln_layer_kind kind) {
  return kind == KILN_LAYER_SOFTMAX || kind == KILN_LAYER_LOG_SOFTMAX;
}

bool is_activation(kiln_layer_kind kind) {
  return kind != KILN_LAYER_LINEAR && kind != KILN_LAYER_DROPOUT && !is_output_transform(kind);
}

int64_t linear_parameters(int64_t in, int64_t out, bool bias) {
  // in, out >= 1; weights plus bias, with room for the flat buffer's
  // alignment padding, must stay within KILN_MAX_PARAMETERS.
  check(in <= KILN_MAX_PARAMETERS / out && in * out <= KILN_MAX_PARAMETERS - out - 64, KILN_ERROR_INVALID_ARGUMENT,
        "Linear(" + std::to_string(in) + ", " + std::to_string(out) +
            ") has more than KILN_MAX_PARAMETERS (2^40) parameters");
  return in * out + (bias ? out : 0) + 32;  // + at most two alignment gaps
}

void ModelSpec::add_linear(int64_t in, int64_t out, bool bias) {
  check(in >= 1 && out >= 1, KILN_ERROR_INVALID_ARGUMENT,
        "Linear sizes must be >= 1, got in_features " + std::to_string(in) + ", out_features " + std::to_string(out));
  linear_parameters(in, out, bias);
  const int64_t prev = output_size();
  if (prev != 0 && prev != in) {
    // Looked for only here: on every call, the scan made reading a file of
    // n Linears take n^2 steps (40,000 layers: 80% of kiln_model_load).
    const bool after_linear = std::any_of(layers_.begin(), layers_.end(),
                                          [](const LayerSpec &l) { return l.kind == KILN_LAYER_LINEAR; });
    fail(KILN_ERROR_SHAPE_MISMATCH, "Linear(" + std::to_string(in) + ", " + std::to_string(out) + ") cannot follow " +
                                        (after_linear ? "a Linear with " + std::to_string(prev) + " outputs"
                                                      : "an input of " + std::to_string(prev) + " features") +
                                        ": in_features must be " + std::to_string(prev));
  }
  LayerSpec l;
  l.kind = KILN_LAYER_LINEAR;
  l.in = in;
  l.out = out;
  l.bias = bias;
  push(l);
}

// Nothing follows an output transform: it is what the model returns.
void ModelSpec::push(const LayerSpec &layer) {
  if (const LayerSpec *t = output_transform())
    fail(KILN_ERROR_INVALID_ARGUMENT, std::string("no layer may follow ") + layer_kind_name(t->kind) +
                                          ": it is the model's output transform, the last layer (got " +
                                          layer_kind_name(layer.kind) + " after it)");
  layers_.push_back(layer);
  index_.push_back(modules_++);
}

void ModelSpec::add_flatten() {
  if (const LayerSpec *t = output_transform())
    fail(KILN_ERROR_INVALID_ARGUMENT, std::string("no layer may follow ") + layer_kind_name(t->kind) +
                                          ": it is the model's output transform, the last layer (got flatten "
                                          "after it)");
  ++modules_;
}

void ModelSpec::add_input(int64_t features) {
  check(features >= 1, KILN_ERROR_INVALID_ARGUMENT,
        "input features must be >= 1, got " + std::to_string(features));
  check(input_ == 0 && modules_ == 0, KILN_ERROR_INVALID_ARGUMENT,
        "input(" + std::to_string(features) + ") must come first, and once");
  check(features <= KILN_MAX_PARAMETERS, KILN_ERROR_INVALID_ARGUMENT,
        "input(" + std::to_string(features) + ") has more features than KILN_MAX_PARAMETERS (2^40)");
  input_ = features;
}

void ModelSpec::add(kiln_layer_kind kind, double arg, double arg2) {
  switch (kind) {
    case KILN_LAYER_LINEAR:
      fail(KILN_ERROR_INVALID_ARGUMENT, "a Linear layer needs sizes: use kiln_model_spec_add_linear");
    case KILN_LAYER_LEAKY_RELU:
      check(std::isfinite(arg), KILN_ERROR_INVALID_ARGUMENT,
            "LeakyReLU negative slope must be finite, got " + number_text(arg));
      arg2 = 0;
      break;
    case KILN_LAYER_ELU:
      check(std::isfinite(arg), KILN_ERROR_INVALID_ARGUMENT, "ELU alpha must be finite, got " + number_text(arg));
      arg2 = 0;
      break;
    case KILN_LAYER_SOFTPLUS:
      check(std::isfinite(arg) && arg != 0, KILN_ERROR_INVALID_ARGUMENT,
            "Softplus beta must be finite and not 0, got " + number_text(arg));
      check(std::isfinite(arg2), KILN_ERROR_INVALID_ARGUMENT,
            "Softplus threshold must be finite, got " + number_text(arg2));
      break;
    case KILN_LAYER_DROPOUT:
      check(arg >= 0 && arg < 1, KILN_ERROR_INVALID_ARGUMENT,
            "Dropout probability must be in [0, 1), got " + number_text(arg));
      arg2 = 0;
      break;
    case KILN_LAYER_RELU: case KILN_LAYER_GELU: case KILN_LAYER_TANH: case KILN_LAYER_SIGMOID:
    case KILN_LAYER_SELU: case KILN_LAYER_SOFTMAX: case KILN_LAYER_LOG_SOFTMAX:
      arg = arg2 = 0;
      break;
    default:
      fail(KILN_ERROR_INVALID_ARGUMENT, "unknown layer kind " + std::to_string(int(kind)));
  }
  LayerSpec l;
  l.kind = kind;
  l.arg = arg;
  l.arg2 = arg2;
  push(l);
}

void ModelSpec::add_mlp(const int64_t *sizes, int64_t n, kiln_layer_kind activation) {
  check(sizes != nullptr, KILN_ERROR_INVALID_ARGUMENT, "sizes is NULL");
  check(n >= 2, KILN_ERROR_INVALID_ARGUMENT, "an MLP needs at least 2 sizes, got " + std::to_string(n));
  check(is_activation(activation) && layer_kind_name(activation)[0] != '?', KILN_ERROR_INVALID_ARGUMENT,
        "the MLP activation must be RELU, LEAKY_RELU, GELU, TANH, SIGMOID, ELU, SELU or SOFTPLUS, got kind " +
            std::to_string(int(activation)));
  const LayerSpec act = with_defaults(activation);
  ModelSpec staged = *this;  // all or nothing
  for (int64_t i = 0; i + 1 < n; ++i) {
    if (i > 0) staged.add(act.kind, act.arg, act.arg2);
    staged.add_linear(sizes[i], sizes[i + 1], true);
  }
  *this = std::move(staged);
}

void ModelSpec::parse(const std::string &raw) {
  std::string text = trim(raw);
  if (text.empty()) bad_text(raw, "it is empty");
  ModelSpec staged = *this;  // all or nothing
  const std::string prefix = "cannot parse model spec";
  try {
    if (text[0] >= '0' && text[0] <= '9')
      parse_compact(text, staged);
    else
      parse_list(text, staged);
  } catch (const Error &e) {
    // Errors of add/add_linear keep their status and gain the text.
    if (std::string(e.what()).compare(0, prefix.size(), prefix) == 0) throw;
    fail(e.status(), prefix + " \"" + excerpt(text) + "\": " + excerpt(e.what(), 300));
  }
  *this = std::move(staged);
}

int64_t ModelSpec::input_size() const {
  for (const LayerSpec &l : layers_)
    if (l.kind == KILN_LAYER_LINEAR) return l.in;
  return input_;
}

int64_t ModelSpec::output_size() const {
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it)
    if (it->kind == KILN_LAYER_LINEAR) return it->out;
  return input_;
}

const LayerSpec *ModelSpec::output_transform() const {
  return !layers_.empty() && is_output_transform(layers_.back().kind) ? &layers_.back() : nullptr;
}

void ModelSpec::validate() const {
  check(input_size() > 0, KILN_ERROR_INVALID_ARGUMENT,
        layers_.empty() ? "the model spec is empty"
                        : "the model spec has no Linear layer (a model without one declares its features: "
                          "input(N) first)");
  // Sizes may come from an untrusted file: every product and the total are
  // checked against the limit before anything multiplies them unchecked.
  int64_t total = 0;
  for (const LayerSpec &l : layers_) {
    if (l.kind != KILN_LAYER_LINEAR) continue;
    const int64_t layer = linear_parameters(l.in, l.out, l.bias);
    check(total <= KILN_MAX_PARAMETERS - layer, KILN_ERROR_INVALID_ARGUMENT,
          "the model spec has more than KILN_MAX_PARAMETERS (2^40) parameters");
    total += layer;
  }
}

namespace {

// A layer in the layer-list form: "leaky_relu(0.1)", "softplus(2,10)".
std::string list_item(const LayerSpec &l) {
  std::string text = layer_kind_name(l.kind);
  if (l.kind == KILN_LAYER_LINEAR)
    return text + "(" + std::to_string(l.in) + "," + std::to_string(l.out) + (l.bias ? ")" : ",nobias)");
  const int values = parameter_count(l.kind);
  if (values == 1) text += "(" + number_text(l.arg) + ")";
  if (values == 2) text += "(" + number_text(l.arg) + "," + number_text(l.arg2) + ")";
  return text;
}

// An activation as a compact-form option: its name, and its parameters
// where they are not PyTorch's defaults (relu is no option at all).
std::string compact_option(const LayerSpec &l) {
  const LayerSpec def = with_defaults(l.kind);
  if (l.kind == KILN_LAYER_RELU) return "";
  std::string text = std::string(":") + layer_kind_name(l.kind);
  if (l.kind == KILN_LAYER_SOFTPLUS && l.arg2 != def.arg2)
    return text + "=" + number_text(l.arg) + "," + number_text(l.arg2);
  if (parameter_count(l.kind) > 0 && l.arg != def.arg) text += "=" + number_text(l.arg);
  return text;
}

}  // namespace

std::string ModelSpec::describe() const {
  // Compact form: Linear, then the same (activation[, dropout]) gap before
  // each further Linear, all with biases, nothing before or after but one
  // Flatten first and an output transform last.
  const LayerSpec *transform = output_transform();
  const std::vector<LayerSpec> body(layers_.begin(), layers_.end() - (transform ? 1 : 0));
  const int64_t flattens = modules_ - int64_t(layers_.size());
  bool compact = !body.empty() && body.front().kind == KILN_LAYER_LINEAR && body.back().kind == KILN_LAYER_LINEAR &&
                 (flattens == 0 || (flattens == 1 && index_.front() == 1));
  const std::string last_options =
      std::string(flattens ? ":flatten" : "") + (transform ? std::string(":") + layer_kind_name(transform->kind) : "");
  std::vector<std::vector<LayerSpec>> gaps(1);
  for (size_t i = 1; compact && i < body.size(); ++i) {
    if (body[i].kind == KILN_LAYER_LINEAR) {
      if (i + 1 < body.size()) gaps.emplace_back();
    } else {
      gaps.back().push_back(body[i]);
    }
  }
  std::string sizes = compact ? std::to_string(body.front().in) : std::string();
  for (const LayerSpec &l : body) {
    if (l.kind != KILN_LAYER_LINEAR) continue;
    if (!l.bias) compact = false;
    sizes += "-" + std::to_string(l.out);
  }
  const std::vector<LayerSpec> &first = gaps.front();
  bool single = sizes.find('-') == sizes.rfind('-');  // one Linear: no gaps at all
  if (compact && !single) {
    compact = (first.size() == 1 || (first.size() == 2 && first[1].kind == KILN_LAYER_DROPOUT)) &&
              is_activation(first[0].kind);
    for (const auto &g : gaps) {
      compact = compact && g.size() == first.size();
      for (size_t j = 0; compact && j < g.size(); ++j)
        compact = g[j].kind == first[j].kind && g[j].arg == first[j].arg && g[j].arg2 == first[j].arg2;
    }
  }
  if (compact && single) return sizes + last_options;
  if (compact) {
    std::string text = sizes + compact_option(first[0]);
    if (first.size() == 2) text += ":dropout=" + number_text(first[1].arg);
    return text + last_options;
  }
  // A model without a Linear says how wide its input is.
  bool any_linear = false;
  for (const LayerSpec &l : layers_) any_linear = any_linear || l.kind == KILN_LAYER_LINEAR;
  std::string text = any_linear || !input_ ? std::string() : "input(" + std::to_string(input_) + ")";
  size_t next = 0;  // the next layer; the indices between layers are Flattens
  for (int64_t m = 0; m < modules_; ++m) {
    if (!text.empty()) text += ";";
    if (next == layers_.size() || index_[next] != m) {
      text += "flatten";
      continue;
    }
    text += list_item(layers_[next++]);
  }
  return text;
}

}  // namespace kiln
