// ONNX export and import of kiln models. The protobuf work happens in the
// plugin libkiln_onnx.so (onnx/plugin.hpp), loaded on the first call; this
// side turns a Model into the plugin's OnnxGraph and back, and does the file
// I/O (atomic writes, regular files only, the size limit).
#pragma once

#include <memory>
#include <string>

#include "nn/model.hpp"

namespace kiln {

// Writes model as an ONNX file atomically (io::write_file_atomically).
// NOT_SUPPORTED when the plugin cannot be loaded; IO on a write failure.
void export_onnx(const Model &model, const std::string &path);
// A CPU model, in training mode like Model::create, from an ONNX MLP.
// FORMAT / NOT_SUPPORTED naming the node for what kiln cannot read; IO for
// an unreadable file.
std::shared_ptr<Model> import_onnx(const std::shared_ptr<Context> &ctx, const std::string &path);

}  // namespace kiln
