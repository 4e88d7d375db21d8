#include "io/tensor_file.hpp"

#include <sys/stat.h>

#include <cerrno>

#include "core/excerpt.hpp"
#include "io/file_kind.hpp"
#include "io/io_error.hpp"
#include "io/regular_file.hpp"
#include "io/safetensors.hpp"
#include "io/torch_file.hpp"

namespace kiln::io {

namespace {

// A safetensors file seen through TensorFile.
class SafetensorsTensors final : public TensorFile {
 public:
  explicit SafetensorsTensors(SafetensorsFile file) : TensorFile(file.path(), "safetensors"), file_(std::move(file)) {
    metadata_ = file_.metadata();
    for (const SafetensorsFile::Entry &e : file_.entries()) add_entry(Entry{e.name, e.dtype, e.shape});
  }
  void read_into(const std::string &name, const Tensor &dst) const override { file_.read_into(name, dst); }

 private:
  SafetensorsFile file_;
};

}  // namespace

const TensorFile::Entry *TensorFile::find(const std::string &name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

void TensorFile::add_entry(Entry e) {
  check(index_.emplace(e.name, entries_.size()).second, KILN_ERROR_INTERNAL,
        "'" + path_ + "' names a tensor twice");
  entries_.push_back(std::move(e));
}

void check_read_destination(const char *format, const std::string &path, const std::string &name, bool found,
                            DType entry_dtype, const Shape &entry_shape, const Tensor &dst) {
  check(found, KILN_ERROR_INVALID_ARGUMENT,
        std::string(format) + " file '" + path + "' has no tensor named " + quoted(name));
  check(dst.dtype() == entry_dtype, KILN_ERROR_DTYPE_MISMATCH,
        "tensor " + quoted(name) + " in '" + path + "' is " + dtype_name(entry_dtype) + ", the destination is " +
            dtype_name(dst.dtype()));
  check(dst.shape() == entry_shape, KILN_ERROR_SHAPE_MISMATCH,
        "tensor " + quoted(name) + " in '" + path + "' has shape " + entry_shape.str() + ", the destination " +
            dst.shape().str());
}

size_t TensorFile::check_destination(const std::string &name, const Tensor &dst) const {
  const Entry *e = find(name);
  check_read_destination(format_, path_, name, e != nullptr, e ? e->dtype : DType::F32, e ? e->shape : Shape(), dst);
  return size_t(e - entries_.data());
}

std::unique_ptr<TensorFile> open_tensor_file(const std::string &path) {
  std::shared_ptr<FileDescriptor> fd = open_shared_regular_file(path);
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) io_error("cannot stat", path, errno);
  const int64_t size = st.st_size;
  const FileKind kind = file_kind(fd->get(), path, size);
  switch (kind) {
    case FileKind::kZip:
      return std::make_unique<TorchFile>(std::move(fd), path, size);
    case FileKind::kOther:
      return std::make_unique<SafetensorsTensors>(SafetensorsFile::open(path));
    case FileKind::kEmpty:
    case FileKind::kTorchLegacy:
    case FileKind::kTar:
    case FileKind::kPickle:
      break;
  }
  fail(KILN_ERROR_FORMAT, not_safetensors_reason(kind, path));
}

}  // namespace kiln::io
