// A strict JSON parser for exactly what file headers need (safetensors):
// objects, arrays, strings (all escapes, UTF-8 validated) and integers that
// fit in int64. Everything else -- floats, true/false/null, duplicate keys,
// nesting deeper than kMaxDepth, trailing non-whitespace -- is rejected, so
// that a hostile header cannot make the parser recurse without bound or
// accept something another reader would read differently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::io::json {

// Deep enough for any safetensors header (object -> object -> array).
constexpr int kMaxDepth = 16;

struct Value {
  enum class Kind { Object, Array, String, Integer };
  Kind kind = Kind::Integer;
  int64_t integer = 0;        // Kind::Integer
  std::string string;         // Kind::String
  std::vector<Value> items;   // Kind::Array elements, or Kind::Object values
  std::vector<std::string> keys;  // Kind::Object keys, unique, in file order (keys[i] names items[i])

  // The member named key of an object, or nullptr.
  const Value *find(const std::string &key) const;
};

// "object", "array", "string", "integer": for messages.
const char *kind_name(Value::Kind kind);

// Parses text as one JSON value, optionally surrounded by whitespace.
// Throws KILN_ERROR_FORMAT "<what>: <problem> at byte <offset>".
Value parse(std::string_view text, const std::string &what);

// s as a JSON string literal, quotes included; control characters, '"' and
// '\\' escaped. s is written as given (kiln's names are UTF-8).
std::string quote(const std::string &s);

}  // namespace kiln::io::json
