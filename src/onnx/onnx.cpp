#include "onnx/onnx.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/file_kind.hpp"
#include "io/regular_file.hpp"
#include "io/sha1.hpp"
#include "onnx/external_data.hpp"
#include "onnx/plugin.hpp"
#include "plugin/loader.hpp"

namespace kiln {

namespace {

// The plugin's entry point `name` (loaded once per process), or
// NOT_SUPPORTED saying why there is none.
template <class Fn> Fn entry(const Context &ctx, const char *name) {
#ifndef KILN_HAVE_ONNX
  fail(KILN_ERROR_NOT_SUPPORTED, "this kiln was built without ONNX support: libonnx-dev was not found when it was "
                                 "configured (scripts/install-deps.sh installs it; then rebuild to get "
                                 "libkiln_onnx.so)");
#else
  bool first = false;
  const PluginLibrary &p =
      plugin_once({"libkiln_onnx.so", "ONNX", "it needs libonnx_proto and libprotobuf (Debian's libonnx1)",
                   {"kiln_onnx_export", "kiln_onnx_import"}},
                  &first);
  if (first) ctx.log(KILN_LOG_DEBUG, "the ONNX plugin " + p.searched + ": " + (p.handle ? "loaded" : p.error));
  if (!p.handle) fail(KILN_ERROR_NOT_SUPPORTED, p.error);
  return reinterpret_cast<Fn>(p.symbol(name));
#endif
}

// The whole file, after checking it is a regular file within the limit.
std::string read_file(const std::string &path) {
  const int fd = io::open_regular_file(path);
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(KILN_ERROR_IO, "cannot stat '" + path + "'");
  check(st.st_size <= KILN_ONNX_MAX_FILE_BYTES, KILN_ERROR_NOT_SUPPORTED,
        "'" + path + "' is " + std::to_string(st.st_size) + " bytes, more than KILN_ONNX_MAX_FILE_BYTES (" +
            std::to_string(KILN_ONNX_MAX_FILE_BYTES) + ")");
  std::string bytes(size_t(st.st_size), '\0');
  io::read_exactly(fd, path, bytes.data(), int64_t(bytes.size()), 0);
  return bytes;
}

std::string host_bytes(const Tensor &t) {
  std::string bytes(size_t(t.nbytes()), '\0');
  t.copy_to_host(bytes.data(), int64_t(bytes.size()));
  return bytes;
}

// Runs fn, and gives every error it throws the prefix `what` (once: a
// message that starts with it already keeps it).
template <class F> auto prefixed(const std::string &what, F &&fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error &e) {
    const std::string message = e.what();
    if (message.compare(0, what.size(), what) == 0) throw;
    fail(e.status(), what + ": " + message);
  }
}

// The parameters of layers as one data file's bytes, each tensor at a
// 64-byte boundary, their offsets noted in the layers.
std::string parameter_data(std::vector<OnnxLayer> &layers) {
  std::string data;
  auto place = [&](std::string &bytes, int64_t *offset) {
    data.resize((data.size() + 63) / 64 * 64, '\0');
    *offset = int64_t(data.size());
    data += bytes;
    std::string().swap(bytes);
  };
  for (OnnxLayer &l : layers) {
    if (l.kind != KILN_LAYER_LINEAR) continue;
    place(l.weight, &l.weight_offset);
    if (l.has_bias) place(l.bias, &l.bias_offset);
  }
  return data;
}

}  // namespace

void export_onnx(const Model &model, const std::string &path, bool external_data) {
  const std::string what = "cannot export '" + path + "' as ONNX";
  prefixed(what, [&] {
    const auto export_graph = entry<kiln_onnx_export_fn>(*model.context(), "kiln_onnx_export");
    OnnxGraph graph;
    graph.dtype = model.dtype() == DType::F64 ? KILN_F64 : KILN_F32;
    graph.input_features = model.input_size();
    graph.modules = model.spec().module_count();
    size_t next = 0;  // the model's parameters come in layer order: weight, then bias
    const std::vector<LayerSpec> &layers = model.spec().layers();
    for (size_t i = 0; i < layers.size(); ++i) {
      const LayerSpec &spec = layers[i];
      OnnxLayer l;
      l.kind = spec.kind;
      l.module = model.spec().module_index(i);
      l.arg = spec.arg;
      l.arg2 = spec.arg2;
      if (spec.kind == KILN_LAYER_LINEAR) {
        l.in = spec.in;
        l.out = spec.out;
        l.has_bias = spec.bias;
        l.weight = host_bytes(model.parameter(next++));
        if (spec.bias) l.bias = host_bytes(model.parameter(next++));
      }
      graph.layers.push_back(std::move(l));
    }
    const int64_t parameter_bytes = model.num_parameters() * int64_t(dtype_size(model.dtype()));
    if (external_data || onnx_needs_external_data(parameter_bytes, int64_t(graph.layers.size()))) {
      const std::string data = parameter_data(graph.layers);
      io::Sha1 sha;
      sha.update(data.data(), data.size());
      graph.data_location = external_data_location(path);
      graph.data_checksum = sha.hex();
      // The data first: a model file never names a data file not yet there.
      io::write_file_atomically(path + ".data",
                                [&](std::FILE *f) { std::fwrite(data.data(), 1, data.size(), f); });
    }
    std::string bytes;
    char reason[512] = {};
    const kiln_status status = export_graph(&graph, kiln_version_string(), &bytes, reason, sizeof reason);
    if (status != KILN_OK) fail(status, one_line(reason));
    io::write_file_atomically(path, [&](std::FILE *f) { std::fwrite(bytes.data(), 1, bytes.size(), f); });
  });
}

std::shared_ptr<Model> import_onnx(const std::shared_ptr<Context> &ctx, const std::string &path) {
  const std::string what = "cannot import '" + path + "'";
  return prefixed(what, [&] {
    const auto import_graph = entry<kiln_onnx_import_fn>(*ctx, "kiln_onnx_import");
    const std::string bytes = read_file(path);
    check(!bytes.empty(), KILN_ERROR_FORMAT, io::empty_file_reason(path));
    OnnxGraph graph;
    ExternalDataReader external(path);
    const OnnxExternalReader reader = external.plugin_reader();
    char reason[512] = {};
    const kiln_status status =
        import_graph(bytes.data(), int64_t(bytes.size()), &reader, &graph, reason, sizeof reason);
    if (status != KILN_OK) fail(status, one_line(reason));

    // The plugin checked the chain's widths; ModelSpec checks them again with
    // kiln's own rules (sizes, KILN_MAX_PARAMETERS), each failure naming the node.
    ModelSpec spec;
    bool linear = false;
    for (const OnnxLayer &l : graph.layers) linear = linear || l.kind == KILN_LAYER_LINEAR;
    if (!linear) spec.add_input(graph.input_features);  // the plugin refuses a graph without either
    // The indices between the layers' are the graph's Flattens.
    for (const OnnxLayer &l : graph.layers) {
      try {
        while (spec.module_count() < l.module) spec.add_flatten();
        if (l.kind == KILN_LAYER_LINEAR) spec.add_linear(l.in, l.out, l.has_bias);
        else spec.add(l.kind, l.arg, l.arg2);
      } catch (const Error &e) {
        fail(KILN_ERROR_FORMAT, l.node + ": " + e.what());
      }
      check(spec.module_index(spec.layers().size() - 1) == l.module, KILN_ERROR_INTERNAL,
            "the ONNX plugin numbered " + l.node + " out of order");
    }
    while (spec.module_count() < graph.modules) spec.add_flatten();
    check(!graph.input_features || graph.input_features == spec.input_size(), KILN_ERROR_FORMAT,
          "the graph's input has " + std::to_string(graph.input_features) +
              " features per sample but its first layer takes " + std::to_string(spec.input_size()));
    std::shared_ptr<Model> model =
        Model::create(ctx, spec, Device::cpu(), graph.dtype == KILN_F64 ? DType::F64 : DType::F32);
    size_t next = 0;
    for (const OnnxLayer &l : graph.layers) {
      if (l.kind != KILN_LAYER_LINEAR) continue;
      model->parameter(next++).copy_from_host(l.weight.data(), int64_t(l.weight.size()));
      if (l.has_bias) model->parameter(next++).copy_from_host(l.bias.data(), int64_t(l.bias.size()));
    }
    return model;
  });
}

}  // namespace kiln
