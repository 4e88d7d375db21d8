// Text from untrusted input (a spec string, a name inside a file) made fit
// for an error message: bounded, and on one line.
#pragma once

#include <cstdio>
#include <string>

namespace kiln {

// At most limit bytes of s, then "... (N bytes)": a megabyte of input must
// not make a megabyte of message.
inline std::string excerpt(const std::string &s, size_t limit = 120) {
  if (s.size() <= limit) return s;
  return s.substr(0, limit) + "... (" + std::to_string(s.size()) + " bytes)";
}

// s cut as excerpt does, with quotes, backslashes and control bytes
// escaped ("\n", "\x01"), so that text read from a file cannot break the
// message's line or its quoting.
inline std::string printable(const std::string &s, size_t limit = 120) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < limit; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += char(c);
    }
  }
  if (s.size() > limit) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

// printable(s) in double quotes: a name from a file, in a message.
inline std::string quoted(const std::string &s, size_t limit = 120) { return "\"" + printable(s, limit) + "\""; }

}  // namespace kiln
