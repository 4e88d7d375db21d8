// The contract between libkiln and the ONNX plugin, libkiln_onnx.so, which
// holds everything that touches protobuf (Debian's libonnx_proto and
// libprotobuf) so that libkiln.so links neither: a host program that brings
// its own protobuf never meets a second one unless it asks for ONNX.
// libkiln loads the plugin on the first ONNX call (from libkiln's directory
// or KILN_BACKEND_PATH, like libkiln_dist.so, through plugin/loader.hpp,
// which refuses a plugin of another build).
//
// Across the boundary a model is an OnnxGraph: the kiln layer list with each
// Linear's parameters as host bytes in kiln's layout. The plugin maps it to
// ONNX nodes and back; libkiln builds the Model and does all file I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln {

struct OnnxLayer {
  kiln_layer_kind kind = KILN_LAYER_LINEAR;
  int64_t in = 0, out = 0;  // Linear only
  bool has_bias = false;    // Linear only
  // LeakyReLU's slope, ELU's alpha, Softplus's beta, Dropout's probability;
  // arg2: Softplus's threshold (nn/spec.hpp's LayerSpec).
  double arg = 0, arg2 = 0;
  // Linear only, in the graph's dtype, little-endian: weight [out, in]
  // row-major (PyTorch's layout) and bias [out]. Export with external data:
  // empty, the bytes being at weight_offset / bias_offset of the data file.
  std::string weight, bias;
  int64_t weight_offset = -1, bias_offset = -1;
  std::string node;  // import: the ONNX node it came from, for messages
  // The layer's index in nn.Sequential (nn/spec.hpp's module_index, which
  // counts a Flatten), the prefix of its parameters' names. The indices
  // that no layer has (below OnnxGraph::modules) are Flattens: the export
  // writes a Flatten node there, and the import reads one as such.
  int64_t module = 0;
};

struct OnnxGraph {
  kiln_dtype dtype = KILN_F32;  // F32 or F64: the input, the output and every parameter
  // The features per sample of the graph's input. Import: the product of
  // its dimensions after the batch one, or a Reshape's width; 0 when they
  // are symbolic. Export: the model's input size.
  int64_t input_features = 0;
  std::vector<OnnxLayer> layers;
  // The nn.Sequential indices the model takes, its layers' and its
  // Flattens' (ModelSpec::module_count): layers.size() plus the Flattens.
  int64_t modules = 0;
  // Export only: the file beside the model that holds every parameter (its
  // name, relative to the model's folder) and the SHA-1 of its contents in
  // hex, as ONNX's external_data records them; empty: parameters inline.
  std::string data_location, data_checksum;
};

// Import: one tensor's data in a file beside the model
// (TensorProto.external_data), checked by the plugin against the tensor
// (bytes: what its shape and type need; a given length must equal it).
struct OnnxExternalRef {
  std::string location;  // as the file names it; libkiln resolves and checks it
  int64_t offset = 0;
  int64_t bytes = 0;
  std::string checksum;  // "" when not given
};

// Import: how the plugin reads external data. libkiln does every file
// access (the path checks, the reads, the checksums); each function returns
// KILN_OK, or a status with why in reason[0..reason_size). Never throws.
struct OnnxExternalReader {
  void *user = nullptr;
  // The size of the file `location` names, in bytes.
  kiln_status (*file_size)(void *user, const std::string &location, int64_t *bytes, char *reason,
                           int64_t reason_size) = nullptr;
  // ref.bytes bytes at ref.offset of ref.location into *out.
  kiln_status (*read)(void *user, const OnnxExternalRef &ref, std::string *out, char *reason,
                      int64_t reason_size) = nullptr;
};

}  // namespace kiln

extern "C" {
// Serializes graph (a valid kiln model: libkiln checked it) as an ONNX
// ModelProto into *bytes, its parameters referring to graph.data_location
// when that is set. producer_version is kiln's version string. On failure
// returns the status and writes why into reason[0..reason_size). Never
// throws.
typedef kiln_status (*kiln_onnx_export_fn)(const kiln::OnnxGraph *graph, const char *producer_version,
                                           std::string *bytes, char *reason, int64_t reason_size);
// Parses an ONNX ModelProto from bytes[0..size) into *graph, refusing
// anything but an MLP chain of the supported ops: FORMAT for a malformed,
// truncated or inconsistent file, NOT_SUPPORTED for an op, opset, dtype or
// feature kiln does not read; reason names the node. External data is read
// through `external` (null: refused). Linear in size. Never throws.
typedef kiln_status (*kiln_onnx_import_fn)(const char *bytes, int64_t size, const kiln::OnnxExternalReader *external,
                                           kiln::OnnxGraph *graph, char *reason, int64_t reason_size);
}
