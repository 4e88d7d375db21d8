// A file of named tensors, whatever its format: what the model loaders read
// weights from. open_tensor_file tells the format from the content, never
// from the name:
//   - safetensors (SafetensorsFile), kiln's own model files among them;
//   - a torch.save zip archive (TorchFile), PyTorch's format since 1.6;
// and refuses, with a sentence saying what the file is and what to do, an
// empty file and PyTorch's legacy formats. Every reader validates the whole
// file's structure when it opens it, before anything trusts its sizes.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.hpp"

namespace kiln::io {

class TensorFile {
 public:
  struct Entry {
    std::string name;
    DType dtype = DType::F32;
    Shape shape;
  };

  virtual ~TensorFile() = default;
  TensorFile(const TensorFile &) = delete;
  TensorFile &operator=(const TensorFile &) = delete;

  const std::string &path() const { return path_; }
  // "safetensors" or "torch.save", for messages.
  const char *format() const { return format_; }
  // safetensors' __metadata__; empty for torch.save files.
  const std::map<std::string, std::string> &metadata() const { return metadata_; }
  // In the file's order.
  const std::vector<Entry> &entries() const { return entries_; }
  // The entry named name, or nullptr.
  const Entry *find(const std::string &name) const;

  // Reads tensor `name` into dst (any device, contiguous), whose dtype and
  // shape must equal the file's: DTYPE_MISMATCH / SHAPE_MISMATCH naming the
  // tensor and both; INVALID_ARGUMENT for a name the file lacks; FORMAT for
  // data found damaged on the way (a CRC); IO. Safe from several threads.
  virtual void read_into(const std::string &name, const Tensor &dst) const = 0;

 protected:
  TensorFile(std::string path, const char *format) : path_(std::move(path)), format_(format) {}
  // Names are unique in every format kiln reads (INTERNAL otherwise).
  void add_entry(Entry e);
  // The position of entry `name` after check_read_destination.
  size_t check_destination(const std::string &name, const Tensor &dst) const;

  std::map<std::string, std::string> metadata_;

 private:
  std::string path_;
  const char *format_;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

// The checks of every reader's read_into(name, dst): INVALID_ARGUMENT when
// the file (format, path) has no tensor `name` (entry_dtype and entry_shape
// are then unused), DTYPE_MISMATCH / SHAPE_MISMATCH when dst is not of the
// tensor's dtype and shape, each naming the tensor and both.
void check_read_destination(const char *format, const std::string &path, const std::string &name, bool found,
                            DType entry_dtype, const Shape &entry_shape, const Tensor &dst);

// Opens path as whichever format its content is (see above). FORMAT for an
// empty file, PyTorch's legacy formats (saying how to save it again) and
// whatever the format's reader refuses; IO naming path.
std::unique_ptr<TensorFile> open_tensor_file(const std::string &path);

}  // namespace kiln::io
