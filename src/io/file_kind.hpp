// What a file's first bytes say it is, for the readers that must tell
// formats apart by content (never by name) and for the messages of a reader
// given a file of another format.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::io {

enum class FileKind {
  kEmpty,        // 0 bytes
  kZip,          // a zip archive: torch.save's format since PyTorch 1.6
  kTorchLegacy,  // torch.save(..., _use_new_zipfile_serialization=False)
  kTar,          // a tar archive: torch.save's format in the earliest PyTorch releases
  kPickle,       // a bare pickle stream (protocol 2 to 5): pickle.dump, not torch.save
  kOther,        // none of these (safetensors, or anything else)
};

// The kind of a file of file_size bytes whose first min(file_size, 512)
// bytes are head.
FileKind file_kind(const std::string &head, int64_t file_size);
// The kind of the regular file open as fd (path for messages); reads its
// first bytes (IO errors naming path).
FileKind file_kind(int fd, const std::string &path, int64_t file_size);

// The sentence for an empty file at path given where any model was expected
// (a write that never finished, more often than not).
std::string empty_file_reason(const std::string &path);
// For a file of `kind` at path given where a safetensors file was expected:
// a sentence saying what it is and what to do instead ("'m.pt' is a
// torch.save file (a zip archive), not safetensors: ..."); "" for kOther.
std::string not_safetensors_reason(FileKind kind, const std::string &path);
// The sentence for the torch.save formats kiln does not read (kTorchLegacy,
// kTar): what they are and how to save the file again in one it reads.
std::string legacy_torch_reason(FileKind kind, const std::string &path);

}  // namespace kiln::io
