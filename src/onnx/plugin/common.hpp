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
// The import reads opsets 7 to 28: the ops it reads mean the same in all of
// them (where they changed, in Softmax's axis at 13, Dropout's ratio at 12
// and Squeeze/Unsqueeze's axes at 13, it reads each form as its opset
// defines it; Erf and Gelu need the opsets that introduced them). Opset 6
// and older (Gemm's and Add's "broadcast", Dropout's "is_test") are refused
// with the converter to use named; a later opset may change an op, so it is
// refused rather than guessed at. IR versions 3 to 14 (onnx 1.23's).
constexpr int64_t kMinImportOpset = 7;
constexpr int64_t kMaxImportOpset = 28;
constexpr int64_t kMinImportIr = 3;
constexpr int64_t kMaxImportIr = 14;
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
