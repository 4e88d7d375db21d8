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
  double arg = 0;           // LeakyReLU's slope, Dropout's probability
  // Linear only, in the graph's dtype, little-endian: weight [out, in]
  // row-major (PyTorch's layout) and bias [out].
  std::string weight, bias;
  std::string node;  // import: the ONNX node it came from, for messages
};

struct OnnxGraph {
  kiln_dtype dtype = KILN_F32;  // F32 or F64: the input, the output and every parameter
  // Import: the features per sample the graph's input declares (the product
  // of its dimensions after the batch one, or a Reshape's width); 0 when
  // they are symbolic.
  int64_t input_features = 0;
  std::vector<OnnxLayer> layers;
};

}  // namespace kiln

extern "C" {
// Serializes graph (a valid kiln model: libkiln checked it) as an ONNX
// ModelProto into *bytes. producer_version is kiln's version string. On
// failure returns the status and writes why into reason[0..reason_size).
// Never throws.
typedef kiln_status (*kiln_onnx_export_fn)(const kiln::OnnxGraph *graph, const char *producer_version,
                                           std::string *bytes, char *reason, int64_t reason_size);
// Parses an ONNX ModelProto from bytes[0..size) into *graph, refusing
// anything but an MLP chain of the supported ops: FORMAT for a malformed,
// truncated or inconsistent file, NOT_SUPPORTED for an op, opset, dtype or
// feature (external data) kiln does not read; reason names the node. Linear
// in size. Never throws.
typedef kiln_status (*kiln_onnx_import_fn)(const char *bytes, int64_t size, kiln::OnnxGraph *graph, char *reason,
                                           int64_t reason_size);
}
