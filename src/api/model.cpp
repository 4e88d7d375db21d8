// C entry points: model specs and models.
#include <string>

#include "api/handles.hpp"
#include "nn/model.hpp"
#include "onnx/onnx.hpp"

namespace {

using kiln::api::guard;
using kiln::api::query;
using kiln::api::lookup;
using kiln::api::require;
using kiln::api::value;

void check_index(const kiln::Model &model, int64_t index) {
  const int64_t n = int64_t(model.parameters().size());
  kiln::check(index >= 0 && index < n, KILN_ERROR_INVALID_ARGUMENT,
              "parameter index " + std::to_string(index) + " is out of range: the model has " + std::to_string(n) +
                  " parameter tensors");
}

}  // namespace

extern "C" {

KILN_API kiln_status kiln_model_spec_create(kiln_model_spec **out) {
  return guard([&] {
    require(out, "out");
    *out = kiln::api::make_handle<kiln_model_spec>(std::make_shared<kiln::ModelSpec>());
  }, out);
}

KILN_API void kiln_model_spec_release(kiln_model_spec *spec) { kiln::api::release_handle(spec); }

KILN_API kiln_status kiln_model_spec_add_linear(kiln_model_spec *spec, int64_t in_features, int64_t out_features,
                                                int bias) {
  return guard([&] { lookup(spec, "spec")->value->add_linear(in_features, out_features, bias != 0); });
}

KILN_API kiln_status kiln_model_spec_add(kiln_model_spec *spec, kiln_layer_kind kind, double arg) {
  return guard([&] {
    lookup(spec, "spec")->value->add(
        kiln::api::checked_enum(kind, KILN_LAYER_LINEAR, KILN_LAYER_LOG_SOFTMAX, "layer kind"), arg);
  });
}

KILN_API kiln_status kiln_model_spec_add_v2(kiln_model_spec *spec, kiln_layer_kind kind, double arg, double arg2) {
  return guard([&] {
    lookup(spec, "spec")->value->add(
        kiln::api::checked_enum(kind, KILN_LAYER_LINEAR, KILN_LAYER_LOG_SOFTMAX, "layer kind"), arg, arg2);
  });
}

KILN_API kiln_status kiln_model_spec_add_mlp(kiln_model_spec *spec, const int64_t *sizes, int64_t n,
                                             kiln_layer_kind activation) {
  return guard([&] {
    kiln_model_spec *s = lookup(spec, "spec");
    require(sizes, "sizes");
    s->value->add_mlp(sizes, n,
                      kiln::api::checked_enum(activation, KILN_LAYER_LINEAR, KILN_LAYER_LOG_SOFTMAX, "layer kind"));
  });
}

KILN_API kiln_status kiln_model_spec_parse(kiln_model_spec *spec, const char *text) {
  return guard([&] {
    kiln_model_spec *s = lookup(spec, "spec");
    require(text, "text");
    s->value->parse(text);
  });
}

KILN_API kiln_status kiln_model_create_dtype(kiln_context *ctx, const kiln_model_spec *spec, kiln_device device,
                                             kiln_dtype dtype, kiln_model **out) {
  return guard([&] {
    std::shared_ptr<kiln::Context> c = value(ctx, "ctx");
    std::shared_ptr<kiln::ModelSpec> s = value(spec, "spec");
    require(out, "out");
    std::shared_ptr<kiln::Model> model =
        kiln::Model::create(c, *s, kiln::api::device(device), kiln::api::dtype(dtype));
    *out = kiln::api::make_handle<kiln_model>(std::move(model));
  }, out);
}

KILN_API kiln_status kiln_model_create(kiln_context *ctx, const kiln_model_spec *spec, kiln_device device,
                                       kiln_model **out) {
  return kiln_model_create_dtype(ctx, spec, device, KILN_F32, out);
}

KILN_API void kiln_model_release(kiln_model *model) { kiln::api::release_handle(model); }

KILN_API kiln_status kiln_model_retain(kiln_model *model, kiln_model **out) {
  return kiln::api::retain_handle(model, "model", out);
}

KILN_API kiln_status kiln_model_to(kiln_model *model, kiln_device device) {
  return guard([&] {
    std::shared_ptr<kiln::Model> m = value(model, "model");
    kiln::Device d = kiln::api::device(device);
    m->context()->validate(d);
    m->to(d);
  });
}

KILN_API kiln_status kiln_model_device(const kiln_model *model, kiln_device *out) {
  return query(model, "model", out, [](const auto &m) { return m->device().to_c(); });
}

KILN_API kiln_status kiln_model_set_training(kiln_model *model, int training) {
  return guard([&] { value(model, "model")->set_training(training != 0); });
}

KILN_API kiln_status kiln_model_is_training(const kiln_model *model, int *out) {
  return query(model, "model", out, [](const auto &m) { return m->training() ? 1 : 0; });
}

KILN_API kiln_status kiln_model_num_parameters(const kiln_model *model, int64_t *out) {
  return query(model, "model", out, [](const auto &m) { return m->num_parameters(); });
}

KILN_API kiln_status kiln_model_input_size(const kiln_model *model, int64_t *out) {
  return query(model, "model", out, [](const auto &m) { return m->input_size(); });
}

KILN_API kiln_status kiln_model_output_size(const kiln_model *model, int64_t *out) {
  return query(model, "model", out, [](const auto &m) { return m->output_size(); });
}

KILN_API kiln_status kiln_model_describe(const kiln_model *model, const char **out) {
  return query(model, "model", out, [](const auto &m) { return m->description().c_str(); });
}

KILN_API kiln_status kiln_model_num_parameter_tensors(const kiln_model *model, int64_t *out) {
  return query(model, "model", out, [](const auto &m) { return int64_t(m->parameters().size()); });
}

KILN_API kiln_status kiln_model_parameter(kiln_model *model, int64_t index, kiln_tensor **out) {
  return guard([&] {
    std::shared_ptr<kiln::Model> m = value(model, "model");
    require(out, "out");
    check_index(*m, index);
    *out = kiln::api::make_handle<kiln_tensor>(m->parameter(size_t(index)));
  }, out);
}

KILN_API kiln_status kiln_model_parameter_name(const kiln_model *model, int64_t index, const char **out) {
  return guard([&] {
    std::shared_ptr<kiln::Model> m = value(model, "model");
    require(out, "out");
    check_index(*m, index);
    *out = m->parameters()[size_t(index)].name.c_str();
  }, out);
}

KILN_API kiln_status kiln_model_forward(kiln_model *model, const kiln_tensor *x, kiln_tensor **out) {
  return guard([&] {
    std::shared_ptr<kiln::Model> m = value(model, "model");
    kiln::Tensor t = value(x, "x");
    require(out, "out");
    *out = kiln::api::make_handle<kiln_tensor>(m->forward(t));
  }, out);
}

KILN_API kiln_status kiln_model_predict(kiln_model *model, const kiln_tensor *x, kiln_predict_kind kind,
                                        kiln_tensor **out) {
  return guard([&] {
    std::shared_ptr<kiln::Model> m = value(model, "model");
    kiln::Tensor t = value(x, "x");
    require(out, "out");
    *out = kiln::api::make_handle<kiln_tensor>(
        m->predict(t, kiln::api::checked_enum(kind, KILN_PREDICT_LOGITS, KILN_PREDICT_CLASSES, "predict kind")));
  }, out);
}

KILN_API kiln_status kiln_model_save(const kiln_model *model, const char *path) {
  return guard([&] {
    std::shared_ptr<kiln::Model> m = value(model, "model");
    require(path, "path");
    kiln::save_model(*m, path);
  });
}

KILN_API kiln_status kiln_model_load(kiln_context *ctx, const char *path, kiln_device device, kiln_model **out) {
  return guard([&] {
    std::shared_ptr<kiln::Context> c = value(ctx, "ctx");
    require(path, "path");
    require(out, "out");
    std::shared_ptr<kiln::Model> model = kiln::load_model(c, path, kiln::api::device(device));
    *out = kiln::api::make_handle<kiln_model>(std::move(model));
  }, out);
}

KILN_API kiln_status kiln_model_load_with_spec(kiln_context *ctx, const char *path, const kiln_model_spec *spec,
                                               kiln_device device, kiln_model **out) {
  return guard([&] {
    std::shared_ptr<kiln::Context> c = value(ctx, "ctx");
    require(path, "path");
    std::shared_ptr<kiln::ModelSpec> s = value(spec, "spec");
    require(out, "out");
    std::shared_ptr<kiln::Model> model = kiln::load_model_with_spec(c, path, *s, kiln::api::device(device));
    *out = kiln::api::make_handle<kiln_model>(std::move(model));
  }, out);
}

KILN_API kiln_status kiln_model_export_onnx(const kiln_model *model, const char *path) {
  return guard([&] {
    std::shared_ptr<kiln::Model> m = value(model, "model");
    require(path, "path");
    kiln::export_onnx(*m, path, false);
  });
}

KILN_API kiln_status kiln_model_export_onnx_v2(const kiln_model *model, const char *path, uint32_t flags) {
  return guard([&] {
    std::shared_ptr<kiln::Model> m = value(model, "model");
    require(path, "path");
    kiln::check((flags & ~uint32_t(KILN_ONNX_EXPORT_EXTERNAL_DATA)) == 0, KILN_ERROR_INVALID_ARGUMENT,
                "unknown ONNX export flags " + std::to_string(flags) + " (KILN_ONNX_EXPORT_EXTERNAL_DATA is 1)");
    kiln::export_onnx(*m, path, (flags & KILN_ONNX_EXPORT_EXTERNAL_DATA) != 0);
  });
}

KILN_API kiln_status kiln_model_import_onnx(kiln_context *ctx, const char *path, kiln_model **out) {
  return guard([&] {
    std::shared_ptr<kiln::Context> c = value(ctx, "ctx");
    require(path, "path");
    require(out, "out");
    *out = kiln::api::make_handle<kiln_model>(kiln::import_onnx(c, path));
  }, out);
}

KILN_API kiln_status kiln_model_load_weights(kiln_model *model, const char *path) {
  return guard([&] {
    std::shared_ptr<kiln::Model> m = value(model, "model");
    require(path, "path");
    kiln::load_weights(*m, path);
  });
}

}  // extern "C"
