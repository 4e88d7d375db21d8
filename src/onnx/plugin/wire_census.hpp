// What a serialized ONNX ModelProto holds, counted from its wire format
// before protobuf parses it. protobuf allocates an object for every message
// it reads: a NodeProto of ~150 bytes, plus the slot that points to it, for
// the 2 bytes an empty node takes in the file, so an 8 MB file of 4 million
// empty nodes took 589 MB before the importer could count them (issue 21).
// The census reads each byte once, allocates nothing, and finds the files
// protobuf cannot parse (truncated fields, bad wire types, nesting deeper
// than protobuf's limit) as such.
#pragma once

#include <cstdint>

namespace kiln::onnx_plugin {

// protobuf's own default nesting limit.
constexpr int kMaxMessageDepth = 100;

struct WireCensus {
  bool well_formed = false;   // false: protobuf cannot parse the bytes either
  int64_t graph_nodes = 0;    // the nodes of the model's graph (not of subgraphs)
  int64_t parsed_bytes = 0;   // an upper estimate of the memory the parsed ModelProto takes
};

// The census of bytes[0..size) as a ModelProto.
WireCensus take_census(const char *bytes, int64_t size);

// The most memory kiln lets a file of `size` bytes take once parsed: what an
// MLP's file takes (its weights as raw bytes, about its size) with room to
// spare, and nothing like a file of millions of tiny messages.
constexpr int64_t parse_budget(int64_t size) { return (int64_t(16) << 20) + 4 * size; }

}  // namespace kiln::onnx_plugin
