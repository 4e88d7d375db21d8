// The safetensors format (https://github.com/huggingface/safetensors):
//   8 bytes   little-endian u64 N, the header's length
//   N bytes   a JSON object: {"name": {"dtype": "F32", "shape": [2, 3],
//             "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}
//             padded with trailing spaces
//   the rest  the data section; offsets are relative to its start, and the
//             tensors cover it exactly, without holes or overlaps.
// Tensors are little-endian, row-major, contiguous. kiln reads and writes the
// dtypes it has: F32 F16 BF16 F64 I32 I64 U8.
//
// The reader trusts nothing in the file: every length, offset, shape and
// dtype is checked against the file's real size before anything is
// allocated or read, and a malformed file throws KILN_ERROR_FORMAT saying
// what is wrong and where. Files that cannot be opened or read throw
// KILN_ERROR_IO with the path and strerror.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "io/regular_file.hpp"

namespace kiln::io {

// The largest header kiln reads (the reference implementation's limit).
constexpr uint64_t kSafetensorsMaxHeader = 100u * 1000u * 1000u;

class SafetensorsFile {
 public:
  struct Entry {
    std::string name;
    DType dtype = DType::F32;
    Shape shape;
    int64_t offset = 0;  // of the first byte, from the start of the file
    int64_t size = 0;    // bytes = numel * dtype size
  };

  // Opens and validates path. The file stays open (for read/read_into)
  // until the last copy of the returned object is gone.
  static SafetensorsFile open(const std::string &path);

  const std::string &path() const { return path_; }
  const std::map<std::string, std::string> &metadata() const { return metadata_; }
  // In the order of their data offsets.
  const std::vector<Entry> &entries() const { return entries_; }
  // The entry named name, or nullptr.
  const Entry *find(const std::string &name) const;

  // Reads tensor `name` into dst (any device), whose dtype and shape must
  // equal the file's: DTYPE_MISMATCH / SHAPE_MISMATCH naming the tensor and
  // both; INVALID_ARGUMENT for a name the file lacks. Safe to call from
  // several threads at once (positioned reads).
  void read_into(const std::string &name, const Tensor &dst) const;
  // Tensor `name` as a new tensor on device.
  Tensor read(const std::string &name, const std::shared_ptr<Context> &ctx, Device device) const;

 private:
  std::string path_;
  std::shared_ptr<FileDescriptor> fd_;  // closed when the last copy goes
  std::map<std::string, std::string> metadata_;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;  // name -> entries_ position: find() in O(1)
};

// Writes tensors (on any device: copied to the host) and metadata to path,
// atomically (see atomic_file.hpp). Entries are laid out in the order given;
// names must be unique, non-empty and not "__metadata__" (INVALID_ARGUMENT).
void write_safetensors(const std::string &path, const std::vector<std::pair<std::string, Tensor>> &tensors,
                       const std::map<std::string, std::string> &metadata);

}  // namespace kiln::io
