// Strict JSON parsing for file headers; see json.hpp for what is accepted.
#include "io/json.hpp"

#include <cstdio>
#include <unordered_set>

#include "core/excerpt.hpp"
#include "core/error.hpp"

namespace kiln::io::json {

const Value *Value::find(const std::string &key) const {
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key) return &items[i];
  return nullptr;
}

const char *kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::Object: return "object";
    case Value::Kind::Array: return "array";
    case Value::Kind::String: return "string";
    case Value::Kind::Integer: return "integer";
  }
  return "?";
}

namespace {

class Parser {
 public:
  Parser(std::string_view text, const std::string &what) : text_(text), what_(what) {}

  Value parse_document() {
    skip_space();
    Value v = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) error("unexpected data after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string &problem) const {
    fail(KILN_ERROR_FORMAT, what_ + ": " + problem + " at byte " + std::to_string(pos_));
  }

  bool at_end() const { return pos_ >= text_.size(); }
  unsigned char peek() const { return static_cast<unsigned char>(text_[pos_]); }

  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++pos_;
  }

  void expect(char c) {
    if (at_end() || text_[pos_] != c) error(std::string("expected '") + c + "'");
    ++pos_;
  }

  Value parse_value(int depth) {
    if (at_end()) error("unexpected end of JSON");
    switch (peek()) {
      case '{': return parse_object(depth + 1);
      case '[': return parse_array(depth + 1);
      case '"': {
        Value v;
        v.kind = Value::Kind::String;
        v.string = parse_string();
        return v;
      }
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return parse_integer();
        error("unsupported JSON value (only objects, arrays, strings and integers are allowed)");
    }
  }

  void check_depth(int depth) {
    if (depth > kMaxDepth) error("JSON nested deeper than " + std::to_string(kMaxDepth) + " levels");
  }

  Value parse_object(int depth) {
    check_depth(depth);
    Value v;
    v.kind = Value::Kind::Object;
    expect('{');
    skip_space();
    if (!at_end() && peek() == '}') {
      ++pos_;
      return v;
    }
    // A set, not Value::find, so that a header with many keys stays linear.
    std::unordered_set<std::string> seen;
    for (;;) {
      skip_space();
      if (at_end() || peek() != '"') error("expected a string key");
      size_t key_pos = pos_;
      std::string key = parse_string();
      if (!seen.insert(key).second) {
        pos_ = key_pos;
        error("duplicate key \"" + excerpt(key) + "\"");
      }
      skip_space();
      expect(':');
      skip_space();
      v.items.push_back(parse_value(depth));
      v.keys.push_back(std::move(key));
      skip_space();
      if (at_end()) error("unterminated object");
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return v;
    }
  }

  Value parse_array(int depth) {
    check_depth(depth);
    Value v;
    v.kind = Value::Kind::Array;
    expect('[');
    skip_space();
    if (!at_end() && peek() == ']') {
      ++pos_;
      return v;
    }
    for (;;) {
      skip_space();
      v.items.push_back(parse_value(depth));
      skip_space();
      if (at_end()) error("unterminated array");
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return v;
    }
  }

  // JSON's number grammar restricted to integers: -?(0|[1-9][0-9]*), no
  // fraction or exponent, and the value must fit in int64.
  Value parse_integer() {
    bool negative = false;
    if (peek() == '-') {
      negative = true;
      ++pos_;
    }
    if (at_end() || !(peek() >= '0' && peek() <= '9')) error("expected a digit");
    if (peek() == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' && text_[pos_ + 1] <= '9')
      error("number with a leading zero");
    // Accumulate negatively so that INT64_MIN fits.
    int64_t value = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      int digit = peek() - '0';
      if (__builtin_mul_overflow(value, int64_t(10), &value) || __builtin_sub_overflow(value, digit, &value))
        error("integer does not fit in 64 bits");
      ++pos_;
    }
    if (!at_end() && (peek() == '.' || peek() == 'e' || peek() == 'E'))
      error("non-integer number (only integers are allowed)");
    if (!negative && __builtin_mul_overflow(value, int64_t(-1), &value)) error("integer does not fit in 64 bits");
    Value v;
    v.kind = Value::Kind::Integer;
    v.integer = value;
    return v;
  }

  unsigned hex4() {
    if (text_.size() - pos_ < 4) error("truncated \\u escape");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_++];
      code <<= 4;
      if (c >= '0' && c <= '9') code |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f') code |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') code |= unsigned(c - 'A' + 10);
      else error("bad hex digit in \\u escape");
    }
    return code;
  }

  static void append_utf8(std::string &out, unsigned code) {
    if (code < 0x80) {
      out += char(code);
    } else if (code < 0x800) {
      out += char(0xc0 | (code >> 6));
      out += char(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      out += char(0xe0 | (code >> 12));
      out += char(0x80 | ((code >> 6) & 0x3f));
      out += char(0x80 | (code & 0x3f));
    } else {
      out += char(0xf0 | (code >> 18));
      out += char(0x80 | ((code >> 12) & 0x3f));
      out += char(0x80 | ((code >> 6) & 0x3f));
      out += char(0x80 | (code & 0x3f));
    }
  }

  // Copies one well-formed UTF-8 sequence (no overlongs, surrogates or
  // values past U+10FFFF) starting at pos_.
  void copy_utf8_sequence(std::string &out) {
    unsigned char c = peek();
    int extra;
    unsigned code, min;
    if (c >= 0xc2 && c <= 0xdf) { extra = 1; code = c & 0x1f; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { extra = 2; code = c & 0x0f; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { extra = 3; code = c & 0x07; min = 0x10000; }
    else error("invalid UTF-8 in string");
    if (text_.size() - pos_ <= size_t(extra)) error("truncated UTF-8 sequence in string");
    for (int i = 1; i <= extra; ++i) {
      unsigned char cc = static_cast<unsigned char>(text_[pos_ + i]);
      if ((cc & 0xc0) != 0x80) error("invalid UTF-8 in string");
      code = (code << 6) | (cc & 0x3f);
    }
    if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) error("invalid UTF-8 in string");
    out.append(text_.data() + pos_, size_t(extra) + 1);
    pos_ += size_t(extra) + 1;
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    for (;;) {
      if (at_end()) error("unterminated string");
      unsigned char c = peek();
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) error("unescaped control character in string");
      if (c >= 0x80) {
        copy_utf8_sequence(out);
        continue;
      }
      ++pos_;
      if (c != '\\') {
        out += char(c);
        continue;
      }
      if (at_end()) error("unterminated string");
      char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned code = hex4();
          if (code >= 0xdc00 && code <= 0xdfff) error("unpaired low surrogate in \\u escape");
          if (code >= 0xd800 && code <= 0xdbff) {
            if (text_.size() - pos_ < 2 || text_[pos_] != '\\' || text_[pos_ + 1] != 'u')
              error("unpaired high surrogate in \\u escape");
            pos_ += 2;
            unsigned low = hex4();
            if (low < 0xdc00 || low > 0xdfff) error("unpaired high surrogate in \\u escape");
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
          }
          append_utf8(out, code);
          break;
        }
        default:
          --pos_;
          error("invalid escape in string");
      }
    }
  }

  std::string_view text_;
  const std::string &what_;
  size_t pos_ = 0;
};

}  // namespace

Value parse(std::string_view text, const std::string &what) { return Parser(text, what).parse_document(); }

std::string quote(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace kiln::io::json
