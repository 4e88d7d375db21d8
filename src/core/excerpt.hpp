// Input quoted in error messages, bounded. A message must stay short and
// readable whatever a hostile file or a caller's string holds: a model spec
// of 400 KB, a tensor name of a megabyte, a description of 600,000 layers,
// bytes that are not text. Every message that quotes input quotes an
// excerpt, and the C API bounds the whole message once more
// (kiln_last_error: at most kMaxMessageBytes). Header-only: the ONNX plugin,
// which links no part of kiln, uses it too.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kiln {

// The longest message kiln_last_error() returns, in bytes.
constexpr size_t kMaxMessageBytes = 1024;

namespace excerpt_detail {

// The length of the well-formed UTF-8 character at text[i] (RFC 3629: no
// overlong forms, surrogates or code points past U+10FFFF), or 0.
inline size_t utf8_length(std::string_view text, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = at(i);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (i + n > text.size() || at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace excerpt_detail

// text for a message: its start, at most `limit` bytes, with control
// characters and bytes that are not UTF-8 shown as '?' (a message is one
// line of valid UTF-8 whatever it quotes), and when text is longer, how much
// was left out: "784-32-32-32... (401234 more bytes)".
inline std::string excerpt(std::string_view text, size_t limit = 120) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = c < 0x80 ? 1 : excerpt_detail::utf8_length(text, i);
    if (out.size() + (n ? n : 1) > limit) break;
    if (n == 1) out += (c < 0x20 || c == 0x7f) ? '?' : char(c);
    else if (n > 1) out.append(text.substr(i, n));
    else out += '?';
    i += n ? n : 1;
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size() - i) + " more bytes)";
  return out;
}

// text cut as excerpt cuts it, with quotes, backslashes and control bytes
// escaped ("\n", "\x01") instead of replaced, so that a name read from a
// file keeps its exact bytes in a message without breaking its line or its
// quoting.
inline std::string printable(std::string_view text, size_t limit = 120) {
  std::string out;
  size_t i = 0;
  for (; i < text.size() && i < limit; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += char(c);
    }
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size() - i) + " more bytes)";
  return out;
}

// printable(text) in double quotes: a name from a file, in a message.
inline std::string quoted(std::string_view text, size_t limit = 120) {
  return "\"" + printable(text, limit) + "\"";
}

// message as kiln_last_error() returns it: one line of UTF-8 (control
// characters and bytes that are not UTF-8 shown as '?', whatever a path
// or a name from a file held) of at most kMaxMessageBytes. A longer one
// keeps its start and its last kMessageTail bytes, where the reason a call
// failed usually is ("...: Read-only file system"), and says how much of
// its middle it left out.
inline std::string bounded_message(std::string_view message) {
  constexpr size_t kMessageTail = 256;
  constexpr size_t kNote = 48;  // room for "... (N more bytes) ...", any N
  const std::string line = excerpt(message, message.size());  // never longer than message
  if (line.size() <= kMaxMessageBytes) return line;
  const auto continues = [&](size_t i) { return (static_cast<unsigned char>(line[i]) & 0xC0) == 0x80; };
  size_t tail = line.size() - kMessageTail;
  while (continues(tail)) ++tail;  // from a character's first byte
  size_t head = kMaxMessageBytes - kNote - (line.size() - tail);
  while (head > 0 && continues(head)) --head;  // up to one
  return line.substr(0, head) + "... (" + std::to_string(tail - head) + " more bytes) ..." + line.substr(tail);
}

}  // namespace kiln
