// ONNX's external data: tensors whose bytes are in files beside the model
// (TensorProto.external_data: location, offset, length, checksum), as
// PyTorch's exporter writes every large weight, and as kiln writes a model
// too large for one protobuf file (or when asked). libkiln does this file
// work for the plugin, which only maps protobuf (onnx/plugin.hpp).
//
// A location is a path relative to the model's folder that must stay in it:
// an absolute path, a ".." component, or a symbolic link that leads out of
// the folder is refused (FORMAT), so an untrusted model cannot make kiln
// read /etc/shadow or another user's files. Every read is checked against
// the file's size before anything is allocated.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "io/regular_file.hpp"
#include "onnx/plugin.hpp"

namespace kiln {

// The file `location` names in `folder` (as it is, or resolved), after
// checking it stays there (FORMAT otherwise); IO when it does not exist.
std::string resolve_external_location(const std::string &folder, const std::string &location);

// Reads the external data of the model at model_path for one import, each
// file opened once. Not thread-safe (one import uses it).
class ExternalDataReader {
 public:
  explicit ExternalDataReader(const std::string &model_path);
  // The plugin's view of this reader: function pointers that call it and
  // turn its errors into statuses.
  OnnxExternalReader plugin_reader();

  int64_t file_size(const std::string &location);
  // ref.bytes bytes at ref.offset of ref.location, after checking they lie
  // in the file (FORMAT) and, when ref.checksum is given, the whole file's
  // SHA-1 (FORMAT when it differs).
  std::string read(const OnnxExternalRef &ref);

 private:
  struct File {
    std::string path;
    std::shared_ptr<io::FileDescriptor> fd;
    int64_t size = 0;
    std::string sha1;  // computed when a checksum first asks for it
  };
  File &open(const std::string &location);

  std::string model_path_, folder_;
  std::unordered_map<std::string, File> files_;
};

// Whether an export of `parameter_bytes` bytes of parameters in `layers`
// layers must keep them in a data file: when the model file would not stay
// within KILN_ONNX_MAX_FILE_BYTES (so that kiln reads it back; protobuf's own
// limit, 2 GiB, is above it).
bool onnx_needs_external_data(int64_t parameter_bytes, int64_t layers);

// The data file an export of model file `path` writes beside it, as the
// model names it (relative to its folder): PyTorch's "NAME.onnx.data".
std::string external_data_location(const std::string &path);

}  // namespace kiln
