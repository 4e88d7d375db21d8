// The census of a serialized ModelProto; see wire_census.hpp. It follows
// onnx.proto through protobuf's descriptors, so every message type the file
// may hold (nodes, attributes, tensors, subgraphs) is costed as protobuf will
// allocate it, and fields onnx.proto does not know are costed as protobuf
// keeps them (unknown fields).
#include "onnx/plugin/wire_census.hpp"

#include <unordered_map>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/message.h>
#include <google/protobuf/wire_format_lite.h>
#include <onnx/onnx_pb.h>

namespace kiln::onnx_plugin {

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::io::CodedInputStream;
using Wire = google::protobuf::internal::WireFormatLite;

// What protobuf allocates besides a message object itself, in bytes, on
// the generous side: a heap block's header, a pointer slot of a repeated
// field (its array doubles as it grows), a std::string held by pointer, an
// unknown field in its vector.
constexpr int64_t kHeapBlock = 16;
constexpr int64_t kRepeatedSlot = 16;
constexpr int64_t kString = 64;
constexpr int64_t kUnknownField = 32;

class Census {
 public:
  explicit Census(WireCensus &out)
      : out_(out), node_field_(onnx::GraphProto::descriptor()->FindFieldByName("node")),
        graph_field_(onnx::ModelProto::descriptor()->FindFieldByName("graph")) {}

  // Reads the fields of one message of `type` (null: one that protobuf keeps
  // as unknown fields) up to the stream's limit, or up to the END_GROUP of
  // field `group` when group > 0. False when protobuf could not parse it.
  // model_graph: the message is the model's graph, whose nodes are counted.
  bool message(CodedInputStream &in, const Descriptor *type, int depth, int group, bool model_graph) {
    for (;;) {
      // 0 at the limit, or for a malformed tag (or a literal 0 tag), which
      // leave bytes before the limit.
      const uint32_t tag = in.ReadTag();
      if (tag == 0) return group == 0 && in.BytesUntilLimit() == 0;
      const int number = Wire::GetTagFieldNumber(tag);
      const Wire::WireType wire = Wire::GetTagWireType(tag);
      if (number == 0) return false;
      if (wire == Wire::WIRETYPE_END_GROUP) return number == group;
      const FieldDescriptor *field = type ? type->FindFieldByNumber(number) : nullptr;
      // A known field on its own wire type; anything else protobuf keeps as
      // an unknown field (a packed repeated scalar is known, below).
      const bool known =
          field && Wire::WireTypeForFieldType(static_cast<Wire::FieldType>(field->type())) == wire;
      switch (wire) {
        case Wire::WIRETYPE_VARINT: {
          uint64_t v;
          if (!in.ReadVarint64(&v)) return false;
          out_.parsed_bytes += known ? scalar_cost(field, 1, false) : kUnknownField;
          break;
        }
        case Wire::WIRETYPE_FIXED64: {
          uint64_t v;
          if (!in.ReadLittleEndian64(&v)) return false;
          out_.parsed_bytes += known ? scalar_cost(field, 1, false) : kUnknownField;
          break;
        }
        case Wire::WIRETYPE_FIXED32: {
          uint32_t v;
          if (!in.ReadLittleEndian32(&v)) return false;
          out_.parsed_bytes += known ? scalar_cost(field, 1, false) : kUnknownField;
          break;
        }
        case Wire::WIRETYPE_START_GROUP:
          // onnx.proto has no groups: an unknown one, kept field by field.
          if (depth + 1 > kMaxMessageDepth) return false;
          out_.parsed_bytes += kUnknownField + kHeapBlock;
          if (!message(in, nullptr, depth + 1, number, false)) return false;
          break;
        case Wire::WIRETYPE_LENGTH_DELIMITED:
          if (!length_delimited(in, field, known, depth, model_graph)) return false;
          break;
        default:
          return false;  // wire types 6 and 7 do not exist
      }
    }
  }

 private:
  WireCensus &out_;
  const FieldDescriptor *node_field_, *graph_field_;
  std::unordered_map<const Descriptor *, int64_t> object_sizes_;

  bool length_delimited(CodedInputStream &in, const FieldDescriptor *field, bool known, int depth, bool model_graph) {
    uint32_t length = 0;
    if (!in.ReadVarint32(&length) || int64_t(length) > in.BytesUntilLimit()) return false;
    if (known && field->type() == FieldDescriptor::TYPE_MESSAGE) {
      if (depth + 1 > kMaxMessageDepth) return false;
      out_.parsed_bytes += object_size(field->message_type()) + kHeapBlock + (field->is_repeated() ? kRepeatedSlot : 0);
      if (model_graph && field == node_field_) ++out_.graph_nodes;
      const CodedInputStream::Limit limit = in.PushLimit(int(length));
      if (!message(in, field->message_type(), depth + 1, 0, depth == 0 && field == graph_field_)) return false;
      in.PopLimit(limit);
      return true;
    }
    if (field && field->is_packable() && field->is_repeated() && !known) return packed(in, field, length);
    // A string, bytes, or a field protobuf keeps unknown: a string each.
    out_.parsed_bytes +=
        kString + int64_t(length) + (known ? (field->is_repeated() ? kRepeatedSlot : 0) : kUnknownField);
    return in.Skip(int(length));
  }

  // A packed repeated scalar: its elements, each costed as one.
  bool packed(CodedInputStream &in, const FieldDescriptor *field, uint32_t length) {
    const Wire::WireType wire = Wire::WireTypeForFieldType(static_cast<Wire::FieldType>(field->type()));
    int64_t count = 0;
    if (wire == Wire::WIRETYPE_FIXED32 || wire == Wire::WIRETYPE_FIXED64) {
      const uint32_t width = wire == Wire::WIRETYPE_FIXED32 ? 4 : 8;
      if (length % width) return false;
      count = length / width;
      if (!in.Skip(int(length))) return false;
    } else {
      // Varints: one element per byte without the continuation bit, and
      // the last byte must end one.
      const void *data = nullptr;
      int available = 0;
      if (length > 0 && (!in.GetDirectBufferPointer(&data, &available) || available < int(length))) return false;
      const unsigned char *p = static_cast<const unsigned char *>(data);
      for (uint32_t i = 0; i < length; ++i) count += p[i] < 0x80;
      if (length > 0 && p[length - 1] >= 0x80) return false;
      if (!in.Skip(int(length))) return false;
    }
    out_.parsed_bytes += scalar_cost(field, count, wire != Wire::WIRETYPE_VARINT);
    return true;
  }

  // count elements of a known scalar field: nothing for a singular one (it
  // lives in its message), the element's size for each of a repeated one,
  // twice that when its array grows by doubling (all but packed fixed-size
  // elements, which are reserved at once). Enum values outside the enum are
  // kept as unknown fields.
  static int64_t scalar_cost(const FieldDescriptor *field, int64_t count, bool reserved) {
    if (!field->is_repeated()) return 0;
    int64_t size = 8;
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_ENUM: return count * kUnknownField;
      case FieldDescriptor::CPPTYPE_BOOL: size = 1; break;
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_FLOAT: size = 4; break;
      default: break;
    }
    return count * size * (reserved ? 1 : 2);
  }

  // The bytes of an empty message object of `type`.
  int64_t object_size(const Descriptor *type) {
    auto it = object_sizes_.find(type);
    if (it != object_sizes_.end()) return it->second;
    const google::protobuf::Message *prototype =
        google::protobuf::MessageFactory::generated_factory()->GetPrototype(type);
    const int64_t size = prototype ? int64_t(prototype->SpaceUsedLong()) : 256;
    object_sizes_.emplace(type, size);
    return size;
  }
};

}  // namespace

WireCensus take_census(const char *bytes, int64_t size) {
  WireCensus out;
  if (size < 0 || size > INT32_MAX) return out;
  CodedInputStream in(reinterpret_cast<const uint8_t *>(bytes), int(size));
  in.PushLimit(int(size));
  Census census(out);
  out.well_formed = census.message(in, onnx::ModelProto::descriptor(), 0, 0, false);
  return out;
}

}  // namespace kiln::onnx_plugin
