// ONNX export and import of kiln models. The protobuf work happens in the
// plugin libkiln_onnx.so (onnx/plugin.hpp), loaded on the first call; this
// side turns a Model into the plugin's OnnxGraph and back, and does the file
// I/O (atomic writes, regular files only, the size limit).
#pragma once

#include <memory>
#include <string>

#include "nn/model.hpp"

namespace kiln {

// Writes model as an ONNX file atomically (io::write_file_atomically); its
// parameters go to a data file beside it (onnx/external_data.hpp) when
// external_data is set or the file would be too large without one.
// NOT_SUPPORTED when the plugin cannot be loaded; IO on a write failure.
// Every message starts "cannot export 'path' as ONNX".
void export_onnx(const Model &model, const std::string &path, bool external_data);
// A CPU model, in training mode like Model::create, from an ONNX MLP and
// the external data files beside it. FORMAT / NOT_SUPPORTED naming the node
// for what kiln cannot read; IO for an unreadable file. Every message starts
// "cannot import 'path'".
std::shared_ptr<Model> import_onnx(const std::shared_ptr<Context> &ctx, const std::string &path);

}  // namespace kiln
