// Model files: safetensors holding each parameter under its nn.Sequential
// name, so PyTorch's load_state_dict reads them, plus metadata
// {"format": "kiln-model", "kiln.spec": describe(), "kiln.version"} from
// which kiln_model_load rebuilds the architecture.
#include <map>

#include "io/safetensors.hpp"
#include "nn/model.hpp"

namespace kiln {

namespace {

constexpr const char *kFormat = "kiln-model";

std::map<std::string, std::string> model_metadata(const Model &model) {
  return {{"format", kFormat}, {"kiln.spec", model.description()}, {"kiln.version", kiln_version_string()}};
}

// Throws unless file holds exactly the parameters `params` (of a model
// `description`) with their dtypes and shapes; nothing is read or changed
// before this passes.
void check_matches(const std::vector<ParameterInfo> &params, DType dtype, const std::string &description,
                   const io::SafetensorsFile &file) {
  for (const ParameterInfo &p : params) {
    const io::SafetensorsFile::Entry *e = file.find(p.name);
    check(e != nullptr, KILN_ERROR_SHAPE_MISMATCH,
          file.path() + " has no parameter \"" + p.name + "\": it holds another architecture than the model's " +
              description);
    check(e->shape == p.shape, KILN_ERROR_SHAPE_MISMATCH,
          "parameter \"" + p.name + "\" has shape " + e->shape.str() + " in " + file.path() + " but " +
              p.shape.str() + " in the model " + description);
    check(e->dtype == dtype, KILN_ERROR_DTYPE_MISMATCH,
          "parameter \"" + p.name + "\" is " + dtype_name(e->dtype) + " in " + file.path() + " but the model is " +
              dtype_name(dtype));
  }
  const size_t extra = file.entries().size() - params.size();
  check(file.entries().size() == params.size(), KILN_ERROR_SHAPE_MISMATCH,
        file.path() + " holds " + std::to_string(extra) + " tensors more than the parameters of the model " +
            description);
}

}  // namespace

void save_model(const Model &model, const std::string &path) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (size_t i = 0; i < model.parameters().size(); ++i)
    tensors.emplace_back(model.parameters()[i].name, model.parameter(i));
  io::write_safetensors(path, tensors, model_metadata(model));
}

std::shared_ptr<Model> load_model(const std::shared_ptr<Context> &ctx, const std::string &path, Device device) {
  const io::SafetensorsFile file = io::SafetensorsFile::open(path);
  const auto &meta = file.metadata();
  auto format = meta.find("format"), spec_text = meta.find("kiln.spec");
  check(format != meta.end() && format->second == kFormat && spec_text != meta.end(), KILN_ERROR_FORMAT,
        path + " is not a kiln model file: its metadata lacks \"format\": \"kiln-model\" and \"kiln.spec\"");
  ModelSpec spec;
  try {
    spec.parse(spec_text->second);
  } catch (const Error &e) {
    fail(KILN_ERROR_FORMAT, path + " has an invalid kiln.spec: " + e.what());
  }
  check(!file.entries().empty(), KILN_ERROR_FORMAT, path + " holds no tensors");
  const DType dtype = file.entries().front().dtype;
  check(dtype == DType::F32 || dtype == DType::F64, KILN_ERROR_FORMAT,
        path + " holds " + dtype_name(dtype) + " parameters; kiln models are f32 or f64");
  // Check the spec against the tensors the file really holds before
  // allocating anything: a hostile spec must not make us allocate gigabytes.
  try {
    check_matches(Model::parameters_of(ctx, spec), dtype, spec.describe(), file);
  } catch (const Error &e) {
    fail(KILN_ERROR_FORMAT, path + " does not match its own kiln.spec: " + e.what());
  }
  std::shared_ptr<Model> model = Model::create(ctx, spec, device, dtype);
  for (size_t i = 0; i < model->parameters().size(); ++i) file.read_into(model->parameters()[i].name, model->parameter(i));
  return model;
}

void load_weights(Model &model, const std::string &path) {
  const io::SafetensorsFile file = io::SafetensorsFile::open(path);
  check_matches(model.parameters(), model.dtype(), model.description(), file);
  // Read everything into a staging copy first: a read that fails half way
  // (a short file, a device error) must leave the model as it was.
  const Tensor staged = Tensor::full(model.context(), model.flat().shape(), model.dtype(), model.device(), 0.0);
  for (size_t i = 0; i < model.parameters().size(); ++i) {
    const ParameterInfo &p = model.parameters()[i];
    file.read_into(p.name, staged.rows(p.offset, p.offset + p.shape.numel()).reshape(p.shape));
  }
  model.flat().copy_from(staged);
}

}  // namespace kiln
