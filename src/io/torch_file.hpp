// torch.save files: the zip archive PyTorch has written since 1.6,
//   <archive>/data.pkl     the pickled state_dict (io/torch_pickle.hpp)
//   <archive>/data/<key>   each storage's bytes, stored uncompressed
//   <archive>/byteorder    "little" or "big" (older releases wrote none:
//                          little, as PyTorch reads them)
//   <archive>/version      the file format version (1 to 10, as PyTorch's
//                          own reader accepts)
// read as a state_dict of tensors: each a view (size, stride, storage
// offset) of a storage that other tensors may share. Every view is checked
// to lie inside its storage and every storage against its record's size
// when the file is opened; tensors are read strided, byte-swapped from a
// big-endian file, in time linear in the bytes of storage they span.
// Tensors of dtypes kiln lacks (bool, int8, complex, quantized) are refused
// with DTYPE_MISMATCH naming them; everything else wrong is FORMAT.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/tensor_file.hpp"
#include "io/zip.hpp"

namespace kiln::io {

class TorchFile final : public TensorFile {
 public:
  // The archive at path, open as fd (file_size bytes).
  TorchFile(std::shared_ptr<FileDescriptor> fd, const std::string &path, int64_t file_size);
  void read_into(const std::string &name, const Tensor &dst) const override;

 private:
  // Where entry i's elements are: a view of a storage record.
  struct View {
    const ZipArchive::Entry *storage;
    int64_t offset;  // elements
    int64_t stride[KILN_MAX_DIMS];
  };

  ZipArchive zip_;
  bool big_endian_ = false;
  std::vector<View> views_;  // by entry position
};

}  // namespace kiln::io
