// Model files: safetensors holding each parameter under its nn.Sequential
// name, so PyTorch's load_state_dict reads them, plus metadata
// {"format": "kiln-model", "kiln.spec": describe(), "kiln.version",
// "kiln.dtype"} from which kiln_model_load rebuilds the architecture (the
// dtype is the tensors'; "kiln.dtype" says it for a model without any). Weights are read through
// io::open_tensor_file, so a PyTorch state_dict (safetensors or torch.save)
// loads wherever a spec says what it holds.
#include <algorithm>
#include <map>
#include <string_view>
#include <unordered_set>

#include "core/excerpt.hpp"
#include "core/ops.hpp"
#include "core/version.hpp"
#include "io/safetensors.hpp"
#include "io/tensor_file.hpp"
#include "nn/model.hpp"
#include "nn/state_dict_hint.hpp"

namespace kiln {

namespace {

constexpr const char *kFormat = "kiln-model";

std::map<std::string, std::string> model_metadata(const Model &model) {
  return {{"format", kFormat},
          {"kiln.spec", model.description()},
          {"kiln.version", kVersionText},
          {"kiln.dtype", dtype_name(model.dtype())}};
}

// The dtype of a model file: its tensors', or for a model without
// parameters its "kiln.dtype".
DType file_dtype(const io::TensorFile &file, const std::string &path) {
  if (!file.entries().empty()) return file.entries().front().dtype;
  const auto it = file.metadata().find("kiln.dtype");
  check(it != file.metadata().end(), KILN_ERROR_FORMAT, path + " holds no tensors");
  check(it->second == "f32" || it->second == "f64", KILN_ERROR_FORMAT,
        path + " has kiln.dtype \"" + excerpt(it->second) + "\"; kiln models are f32 or f64");
  return it->second == "f64" ? DType::F64 : DType::F32;
}

// Names up to a few of the file's tensors that no parameter of `params` has
// ("\"x\", \"y\" and 3 more"), or "" when there are none. Linear in the
// tensors: a file of 100,000 layers loads in proportion.
std::string extra_names(const std::vector<ParameterInfo> &params, const io::TensorFile &file) {
  std::unordered_set<std::string_view> wanted;
  wanted.reserve(params.size());
  for (const ParameterInfo &p : params) wanted.insert(p.name);
  std::string names;
  size_t count = 0;
  for (const io::TensorFile::Entry &e : file.entries()) {
    if (wanted.count(e.name)) continue;
    if (++count <= 3) names += (names.empty() ? "\"" : ", \"") + excerpt(e.name) + "\"";
  }
  if (count > 3) names += " and " + std::to_string(count - 3) + " more";
  return names;
}

// Whether a state_dict's tensor of dtype `from` reads into a parameter of
// `to` exactly, as PyTorch's load_state_dict copies it: the same dtype, or
// a float widened (f16 and bf16 into f32 and f64, f32 into f64). Narrowing
// would lose digits unseen, so it is refused.
bool widens_exactly(DType from, DType to) {
  const bool half = from == DType::F16 || from == DType::BF16;
  return from == to || (half && (to == DType::F32 || to == DType::F64)) || (from == DType::F32 && to == DType::F64);
}

// The dtype of a model made from a state_dict whose first parameter is
// `first`: f64 for f64, else f32 (kiln's models are one or the other).
DType model_dtype(DType first) { return first == DType::F64 ? DType::F64 : DType::F32; }

// Reads tensor `name` of file into dst, widened to dst's dtype
// (widens_exactly) through a host copy of the file's.
void read_widened(const io::TensorFile &file, const std::string &name, const Tensor &dst) {
  const io::TensorFile::Entry *e = file.find(name);
  if (!e || e->dtype == dst.dtype()) return file.read_into(name, dst);
  const Tensor narrow = Tensor::empty(dst.context(), e->shape, e->dtype, Device::cpu());
  file.read_into(name, narrow);
  dst.copy_from(cast(narrow, dst.dtype()));
}

// Throws unless file holds exactly the parameters `params` (of a model
// `description`) with their shapes and dtype (or, for a state_dict, one
// that widens to it exactly); nothing is read or changed before this
// passes. Every message names the offending tensor, and quotes the
// description in an excerpt (a model of 600,000 layers has a long one).
void check_matches(const std::vector<ParameterInfo> &params, DType dtype, const std::string &description,
                   const io::TensorFile &file, bool widen) {
  const std::string model = "the model " + excerpt(description);
  for (const ParameterInfo &p : params) {
    const io::TensorFile::Entry *e = file.find(p.name);
    check(e != nullptr, KILN_ERROR_SHAPE_MISMATCH,
          file.path() + " has no parameter \"" + p.name + "\": it holds another architecture than " + model);
    check(e->shape == p.shape, KILN_ERROR_SHAPE_MISMATCH,
          "parameter \"" + p.name + "\" has shape " + e->shape.str() + " in " + file.path() + " but " +
              p.shape.str() + " in " + model);
    check(widen ? widens_exactly(e->dtype, dtype) : e->dtype == dtype, KILN_ERROR_DTYPE_MISMATCH,
          "parameter \"" + p.name + "\" is " + dtype_name(e->dtype) + " in " + file.path() + " but the model is " +
              dtype_name(dtype) +
              (widen ? std::string(" (kiln widens f16 and bf16 to f32 and f64, and f32 to f64, but never narrows)")
                     : std::string()));
  }
  // Every parameter was found under a distinct name, so the rest are extra.
  const std::string extra = extra_names(params, file);
  check(extra.empty(), KILN_ERROR_SHAPE_MISMATCH,
        file.path() + " holds " + std::to_string(file.entries().size() - params.size()) + " tensors that " + model +
            " has no parameter for: " + extra);
}

}  // namespace

void save_model(const Model &model, const std::string &path) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (size_t i = 0; i < model.parameters().size(); ++i)
    tensors.emplace_back(model.parameters()[i].name, model.parameter(i));
  io::write_safetensors(path, tensors, model_metadata(model));
}

std::shared_ptr<Model> load_model(const std::shared_ptr<Context> &ctx, const std::string &path, Device device) {
  const std::unique_ptr<io::TensorFile> file = io::open_tensor_file(path);
  const auto &meta = file->metadata();
  auto format = meta.find("format"), spec_text = meta.find("kiln.spec");
  // A state_dict PyTorch saved (safetensors.torch.save_file, torch.save)
  // has everything but the spec: say so, and which spec fits it.
  if (format == meta.end() || format->second != kFormat || spec_text == meta.end())
    fail(KILN_ERROR_FORMAT, path + " is a " + file->format() +
                                " file: a state_dict as PyTorch saves it, without the spec that kiln's model files "
                                "keep in their metadata; load it with its spec: kiln eval FILE --spec SPEC, or "
                                "kiln_model_load_with_spec." +
                                read_state_dict_hint(file->entries()).sentences());
  ModelSpec spec;
  try {
    spec.parse(spec_text->second);
  } catch (const Error &e) {
    fail(KILN_ERROR_FORMAT, path + " has an invalid kiln.spec: " + e.what());
  }
  const DType dtype = file_dtype(*file, path);
  check(dtype == DType::F32 || dtype == DType::F64, KILN_ERROR_FORMAT,
        path + " holds " + dtype_name(dtype) + " parameters; kiln models are f32 or f64");
  // Check the spec against the tensors the file really holds before
  // allocating anything: a hostile spec must not make us allocate gigabytes.
  try {
    check_matches(Model::parameters_of(ctx, spec), dtype, spec.describe(), *file, false);
  } catch (const Error &e) {
    fail(KILN_ERROR_FORMAT, path + " does not match its own kiln.spec: " + e.what());
  }
  std::shared_ptr<Model> model = Model::create(ctx, spec, device, dtype);
  for (size_t i = 0; i < model->parameters().size(); ++i) file->read_into(model->parameters()[i].name, model->parameter(i));
  return model;
}

std::shared_ptr<Model> load_model_with_spec(const std::shared_ptr<Context> &ctx, const std::string &path,
                                            const ModelSpec &spec, Device device) {
  ctx->validate(device);
  const std::unique_ptr<io::TensorFile> file = io::open_tensor_file(path);
  // What the spec needs, worked out without allocating: the file is checked
  // against it before any of its sizes is trusted.
  const std::vector<ParameterInfo> params = Model::parameters_of(ctx, spec);
  const std::string description = spec.describe();
  check(!params.empty(), KILN_ERROR_INVALID_ARGUMENT, "the spec " + excerpt(description) + " has no parameters");
  // The parameters' dtype is the file's: f32, or f64 for an f64 model (as
  // PyTorch's model.double() saves it); f16 and bf16 widen to f32. The
  // first parameter decides; check_matches then names any tensor that does
  // not widen to it.
  const io::TensorFile::Entry *first = file->find(params.front().name);
  try {
    check(first != nullptr, KILN_ERROR_SHAPE_MISMATCH,
          path + " has no tensor \"" + params.front().name + "\", which the spec " + excerpt(description) +
              " needs (names as PyTorch's nn.Sequential state_dict: \"0.weight\", \"0.bias\", \"2.weight\", ...)");
    check(dtype_is_float(first->dtype), KILN_ERROR_DTYPE_MISMATCH,
          "tensor \"" + excerpt(first->name) + "\" in " + path + " is " + dtype_name(first->dtype) +
              "; a model's parameters are floats (kiln models are f32 or f64)");
    check_matches(params, model_dtype(first->dtype), description, *file, true);
  } catch (const Error &e) {
    // Names or shapes that do not fit: say what the file holds instead.
    if (e.status() != KILN_ERROR_SHAPE_MISMATCH) throw;
    const std::string hint = read_state_dict_hint(file->entries()).sentences();
    fail(e.status(), e.what() + std::string(hint.empty() ? "" : ".") + hint);
  }
  std::shared_ptr<Model> model = Model::create(ctx, spec, device, model_dtype(first->dtype));
  for (size_t i = 0; i < model->parameters().size(); ++i)
    read_widened(*file, model->parameters()[i].name, model->parameter(i));
  return model;
}

void load_weights(Model &model, const std::string &path) {
  const std::unique_ptr<io::TensorFile> file = io::open_tensor_file(path);
  check_matches(model.parameters(), model.dtype(), model.description(), *file, true);
  // Read everything into a staging copy first: a read that fails half way
  // (a short file, a device error) must leave the model as it was.
  const Tensor staged = Tensor::full(model.context(), model.flat().shape(), model.dtype(), model.device(), 0.0);
  for (size_t i = 0; i < model.parameters().size(); ++i) {
    const ParameterInfo &p = model.parameters()[i];
    read_widened(*file, p.name, staged.rows(p.offset, p.offset + p.shape.numel()).reshape(p.shape));
  }
  model.flat().copy_from(staged);
}

}  // namespace kiln
