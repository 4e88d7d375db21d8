#include "io/file_kind.hpp"

#include <algorithm>
#include <cstring>

#include "io/regular_file.hpp"

namespace kiln::io {

namespace {

// PROTO 2, LONG1 of 10 bytes: torch.serialization's MAGIC_NUMBER
// 0x1950a86a20f9469cfc6c, the first record of its legacy format (the
// protocol byte may differ when pickle_protocol was given).
constexpr unsigned char kLegacyMagic[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

// A POSIX tar header: "ustar" at 257 and a checksum (bytes 148-155, octal)
// equal to the sum of the header's 512 bytes with the checksum's own as
// spaces; both, so that no safetensors header that happens to hold "ustar"
// is taken for one.
bool is_tar(const std::string &head) {
  if (head.size() < 512 || head.compare(257, 5, "ustar") != 0) return false;
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? unsigned(' ') : static_cast<unsigned char>(head[i]);
  unsigned stored = 0;
  for (size_t i = 148; i < 156 && head[i] >= '0' && head[i] <= '7'; ++i) stored = stored * 8 + unsigned(head[i] - '0');
  return stored == sum;
}

}  // namespace

FileKind file_kind(const std::string &head, int64_t file_size) {
  if (file_size == 0) return FileKind::kEmpty;
  // Byte 8 of a zip is its first entry's method (0 or 8), never the '{' that
  // starts a safetensors header whose length happens to read "PK\3\4".
  if ((head.compare(0, 4, "PK\x03\x04") == 0 || head.compare(0, 4, "PK\x05\x06") == 0) &&
      (head.size() < 9 || head[8] != '{'))
    return FileKind::kZip;
  if (head.size() >= 2 + sizeof kLegacyMagic && static_cast<unsigned char>(head[0]) == 0x80 &&
      std::memcmp(head.data() + 2, kLegacyMagic, sizeof kLegacyMagic) == 0)
    return FileKind::kTorchLegacy;
  if (is_tar(head)) return FileKind::kTar;
  // PROTO 2 to 5 opens a pickle; byte 8 tells it from a safetensors file
  // whose header length starts with the same two bytes (0x280 to 0x580).
  if (head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80 && head[1] >= 2 && head[1] <= 5 &&
      (head.size() < 9 || head[8] != '{'))
    return FileKind::kPickle;
  return FileKind::kOther;
}

FileKind file_kind(int fd, const std::string &path, int64_t file_size) {
  std::string head(size_t(std::min<int64_t>(file_size, 512)), '\0');
  read_exactly(fd, path, head.data(), int64_t(head.size()), 0);
  return file_kind(head, file_size);
}

std::string legacy_torch_reason(FileKind kind, const std::string &path) {
  const std::string resave = ": load it in PyTorch and save it again, with torch.save(torch.load('" + path +
                             "'), PATH) (the default format since PyTorch 1.6) or safetensors.torch.save_file";
  if (kind == FileKind::kTorchLegacy)
    return "'" + path +
           "' was written by torch.save with _use_new_zipfile_serialization=False (PyTorch's legacy format), "
           "which kiln does not read" + resave;
  return "'" + path + "' is a tar archive (the torch.save format of the earliest PyTorch releases, or another "
         "tool's), which kiln does not read" + resave;
}

std::string empty_file_reason(const std::string &path) {
  return "'" + path + "' is empty (0 bytes): it holds no model (was it written completely?)";
}

std::string not_safetensors_reason(FileKind kind, const std::string &path) {
  switch (kind) {
    case FileKind::kEmpty:
      return empty_file_reason(path);
    case FileKind::kZip:
      return "'" + path +
             "' is a torch.save file (a zip archive), not safetensors: kiln reads it as a state_dict given the "
             "model's spec (kiln eval FILE --spec SPEC, or kiln_model_load_with_spec)";
    case FileKind::kTorchLegacy:
    case FileKind::kTar:
      return legacy_torch_reason(kind, path);
    case FileKind::kPickle:
      return "'" + path +
             "' is a bare pickle stream (pickle.dump's, not torch.save's zip archive), which kiln does not read: save "
             "the state_dict with torch.save (the default format since PyTorch 1.6) or safetensors.torch.save_file";
    case FileKind::kOther:
      break;
  }
  return "";
}

}  // namespace kiln::io
