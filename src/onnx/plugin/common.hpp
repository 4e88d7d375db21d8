// What the plugin's export and import share: the versions kiln writes and
// reads, and the one way a failure leaves the plugin.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/excerpt.hpp"
#include "onnx/plugin.hpp"

namespace kiln::onnx_plugin {

// IR version 8 and opset 13 are read by every ONNX Runtime since 1.10 and by
// Debian's onnx 1.12 checker; opset 13 has every op the export writes.
constexpr int64_t kExportIrVersion = 8;
constexpr int64_t kExportOpset = 13;
// The import reads the ops of opsets 9 (Erf, Flatten's current form) to 23;
// a later opset may change them, so it is refused rather than guessed at.
constexpr int64_t kMinImportOpset = 9;
constexpr int64_t kMaxImportOpset = 23;
constexpr int64_t kMaxFileBytes = KILN_ONNX_MAX_FILE_BYTES;

// Writes message into reason (NUL-terminated; an excerpt saying how much was
// left out when it does not fit) and returns status.
inline kiln_status refuse(kiln_status status, const std::string &message, char *reason, int64_t reason_size) {
  if (reason && reason_size > 0) {
    const size_t room = size_t(reason_size - 1);
    std::string text = message.size() <= room ? message : kiln::excerpt(message, room > 40 ? room - 40 : 0);
    text.resize(std::min(text.size(), room));
    std::memcpy(reason, text.data(), text.size());
    reason[text.size()] = '\0';
  }
  return status;
}

}  // namespace kiln::onnx_plugin
