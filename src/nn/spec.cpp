#include "nn/spec.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.hpp"
#include "core/excerpt.hpp"

namespace kiln {

namespace {

constexpr double kDefaultLeakySlope = 0.01;  // torch.nn.LeakyReLU
constexpr double kDefaultDropout = 0.5;      // torch.nn.Dropout

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

// The shortest decimal text that reads back as exactly v, so describe() and
// parse() round-trip every double.
std::string format_double(double v) {
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
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

// An activation name as the text forms spell it; false if it is none.
bool activation_kind(const std::string &name, kiln_layer_kind *kind) {
  static const kiln_layer_kind kinds[] = {KILN_LAYER_RELU, KILN_LAYER_LEAKY_RELU, KILN_LAYER_GELU, KILN_LAYER_TANH,
                                          KILN_LAYER_SIGMOID};
  for (kiln_layer_kind k : kinds)
    if (name == layer_kind_name(k)) {
      *kind = k;
      return true;
    }
  return false;
}

bool is_activation(kiln_layer_kind kind) { return kind != KILN_LAYER_LINEAR && kind != KILN_LAYER_DROPOUT; }

// "784-256-10:gelu:dropout=0.2" appended to spec.
void parse_compact(const std::string &text, ModelSpec &spec) {
  std::vector<std::string> parts = split(text, ':');
  std::vector<int64_t> sizes;
  for (const std::string &s : split(parts[0], '-')) sizes.push_back(parse_size(text, s));
  if (sizes.size() < 2) bad_text(text, "it needs at least two sizes, as in \"784-10\"");

  kiln_layer_kind act = KILN_LAYER_RELU;
  double slope = kDefaultLeakySlope, dropout = 0;
  bool have_act = false, have_dropout = false, flatten = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    size_t eq = parts[i].find('=');
    std::string name = trim(parts[i].substr(0, eq));
    std::string value = eq == std::string::npos ? std::string() : trim(parts[i].substr(eq + 1));
    kiln_layer_kind kind;
    if (name == "flatten") {
      if (flatten) bad_text(text, "flatten is given twice");
      if (eq != std::string::npos) bad_text(text, "flatten takes no value");
      flatten = true;
    } else if (name == "dropout") {
      if (have_dropout) bad_text(text, "dropout is given twice");
      if (eq == std::string::npos) bad_text(text, "dropout needs a probability, as in \"dropout=0.2\"");
      dropout = parse_number(text, value);
      have_dropout = true;
    } else if (activation_kind(name, &kind)) {
      if (have_act) bad_text(text, "more than one activation is given");
      if (eq != std::string::npos) {
        if (kind != KILN_LAYER_LEAKY_RELU) bad_text(text, name + " takes no value");
        slope = parse_number(text, value);
      }
      act = kind;
      have_act = true;
    } else {
      bad_text(text, "unknown option \"" + parts[i] +
                         "\" (expected relu, gelu, tanh, sigmoid, leaky_relu[=slope], dropout=p or flatten)");
    }
  }
  if (flatten) spec.add_flatten();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    if (i > 0) {
      spec.add(act, slope);
      if (have_dropout) spec.add(KILN_LAYER_DROPOUT, dropout);
    }
    spec.add_linear(sizes[i], sizes[i + 1], true);
  }
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
    kiln_layer_kind kind;
    if (name == "flatten") {
      if (has_args) bad_text(text, "flatten takes no value (kiln's Flatten is nn.Flatten(): all but the batch)");
      spec.add_flatten();
    } else if (name == "linear") {
      if (args.size() != 2 && !(args.size() == 3 && args[2] == "nobias"))
        bad_text(text, "\"" + item + "\" should be linear(in,out) or linear(in,out,nobias)");
      spec.add_linear(parse_size(text, args[0]), parse_size(text, args[1]), args.size() == 2);
    } else if (name == "dropout" || name == "leaky_relu") {
      if (args.size() > 1) bad_text(text, "\"" + item + "\" takes one value");
      kind = name == "dropout" ? KILN_LAYER_DROPOUT : KILN_LAYER_LEAKY_RELU;
      double def = kind == KILN_LAYER_DROPOUT ? kDefaultDropout : kDefaultLeakySlope;
      spec.add(kind, args.empty() ? def : parse_number(text, args[0]));
    } else if (activation_kind(name, &kind)) {
      if (has_args) bad_text(text, name + " takes no value");
      spec.add(kind, 0);
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
  }
  return "?";
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
  int64_t prev = output_size();
  check(prev == 0 || prev == in, KILN_ERROR_SHAPE_MISMATCH,
        "Linear(" + std::to_string(in) + ", " + std::to_string(out) + ") cannot follow a Linear with " +
            std::to_string(prev) + " outputs: in_features must be " + std::to_string(prev));
  LayerSpec l;
  l.kind = KILN_LAYER_LINEAR;
  l.in = in;
  l.out = out;
  l.bias = bias;
  push(l);
}

void ModelSpec::push(const LayerSpec &layer) {
  layers_.push_back(layer);
  index_.push_back(modules_++);
}

void ModelSpec::add(kiln_layer_kind kind, double arg) {
  switch (kind) {
    case KILN_LAYER_LINEAR:
      fail(KILN_ERROR_INVALID_ARGUMENT, "a Linear layer needs sizes: use kiln_model_spec_add_linear");
    case KILN_LAYER_LEAKY_RELU:
      check(std::isfinite(arg), KILN_ERROR_INVALID_ARGUMENT,
            "LeakyReLU negative slope must be finite, got " + format_double(arg));
      break;
    case KILN_LAYER_DROPOUT:
      check(arg >= 0 && arg < 1, KILN_ERROR_INVALID_ARGUMENT,
            "Dropout probability must be in [0, 1), got " + format_double(arg));
      break;
    case KILN_LAYER_RELU: case KILN_LAYER_GELU: case KILN_LAYER_TANH: case KILN_LAYER_SIGMOID:
      arg = 0;
      break;
    default:
      fail(KILN_ERROR_INVALID_ARGUMENT, "unknown layer kind " + std::to_string(int(kind)));
  }
  LayerSpec l;
  l.kind = kind;
  l.arg = arg;
  push(l);
}

void ModelSpec::add_mlp(const int64_t *sizes, int64_t n, kiln_layer_kind activation) {
  check(sizes != nullptr, KILN_ERROR_INVALID_ARGUMENT, "sizes is NULL");
  check(n >= 2, KILN_ERROR_INVALID_ARGUMENT, "an MLP needs at least 2 sizes, got " + std::to_string(n));
  check(activation >= KILN_LAYER_RELU && activation <= KILN_LAYER_SIGMOID, KILN_ERROR_INVALID_ARGUMENT,
        "the MLP activation must be RELU, LEAKY_RELU, GELU, TANH or SIGMOID, got kind " +
            std::to_string(int(activation)));
  ModelSpec staged = *this;  // all or nothing
  for (int64_t i = 0; i + 1 < n; ++i) {
    if (i > 0) staged.add(activation, kDefaultLeakySlope);
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
  return 0;
}

int64_t ModelSpec::output_size() const {
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it)
    if (it->kind == KILN_LAYER_LINEAR) return it->out;
  return 0;
}

void ModelSpec::validate() const {
  check(input_size() > 0, KILN_ERROR_INVALID_ARGUMENT,
        layers_.empty() ? "the model spec is empty" : "the model spec has no Linear layer");
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

std::string ModelSpec::describe() const {
  // Compact form: Linear, then the same (activation[, dropout]) gap before
  // each further Linear, all with biases, nothing before or after but one
  // Flatten first.
  const int64_t flattens = modules_ - int64_t(layers_.size());
  bool compact = !layers_.empty() && layers_.front().kind == KILN_LAYER_LINEAR &&
                 layers_.back().kind == KILN_LAYER_LINEAR && (flattens == 0 || (flattens == 1 && index_.front() == 1));
  const std::string flatten_option = flattens ? ":flatten" : "";
  std::vector<std::vector<LayerSpec>> gaps(1);
  for (size_t i = 1; compact && i < layers_.size(); ++i) {
    if (layers_[i].kind == KILN_LAYER_LINEAR) {
      if (i + 1 < layers_.size()) gaps.emplace_back();
    } else {
      gaps.back().push_back(layers_[i]);
    }
  }
  std::string sizes = compact ? std::to_string(layers_.front().in) : std::string();
  for (const LayerSpec &l : layers_) {
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
        compact = g[j].kind == first[j].kind && g[j].arg == first[j].arg;
    }
  }
  if (compact && single) return sizes + flatten_option;
  if (compact) {
    std::string text = sizes;
    const LayerSpec &act = first[0];
    if (act.kind == KILN_LAYER_LEAKY_RELU && act.arg != kDefaultLeakySlope)
      text += ":leaky_relu=" + format_double(act.arg);
    else if (act.kind != KILN_LAYER_RELU)
      text += std::string(":") + layer_kind_name(act.kind);
    if (first.size() == 2) text += ":dropout=" + format_double(first[1].arg);
    return text + flatten_option;
  }
  std::string text;
  size_t next = 0;  // the next layer; the indices between layers are Flattens
  for (int64_t m = 0; m < modules_; ++m) {
    if (!text.empty()) text += ";";
    if (next == layers_.size() || index_[next] != m) {
      text += "flatten";
      continue;
    }
    const LayerSpec &l = layers_[next++];
    text += layer_kind_name(l.kind);
    if (l.kind == KILN_LAYER_LINEAR)
      text += "(" + std::to_string(l.in) + "," + std::to_string(l.out) + (l.bias ? ")" : ",nobias)");
    else if (l.kind == KILN_LAYER_LEAKY_RELU || l.kind == KILN_LAYER_DROPOUT)
      text += "(" + format_double(l.arg) + ")";
  }
  return text;
}

}  // namespace kiln
