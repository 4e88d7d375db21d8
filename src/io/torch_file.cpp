#include "io/torch_file.hpp"

#include <algorithm>
#include <cstring>

#include "core/excerpt.hpp"
#include "io/torch_pickle.hpp"

namespace kiln::io {

namespace {

constexpr int64_t kSmallRecord = 64;  // byteorder, version
constexpr uint64_t kMinVersion = 1, kMaxVersion = 10;  // caffe2/serialize/versions.h

// Reverses the bytes of each of the n elements of size esize at p.
void swap_elements(char *p, int64_t n, int64_t esize) {
  for (int64_t i = 0; i < n; ++i, p += esize) std::reverse(p, p + esize);
}

}  // namespace

TorchFile::TorchFile(std::shared_ptr<FileDescriptor> fd, const std::string &path, int64_t file_size)
    : TensorFile(path, "torch.save"), zip_(std::move(fd), path, file_size) {
  auto error = [&](const std::string &problem) { fail(KILN_ERROR_FORMAT, "torch.save file '" + path + "': " + problem); };

  // The records sit in one folder named after the file ("m/data.pkl" for
  // m.pt, "archive/" for a buffer): the one data.pkl one level down.
  const ZipArchive::Entry *pickle = nullptr;
  for (const ZipArchive::Entry &e : zip_.entries()) {
    const size_t slash = e.name.find('/');
    if (slash == std::string::npos || slash == 0 || e.name.compare(slash, std::string::npos, "/data.pkl") != 0) continue;
    if (pickle) error("it holds two state pickles, " + quoted(pickle->name) + " and " + quoted(e.name));
    pickle = &e;
  }
  if (!pickle) {
    // torch.export.save writes <archive>/archive_format and models/*.json.
    for (const ZipArchive::Entry &e : zip_.entries()) {
      const size_t slash = e.name.find('/');
      if (slash != std::string::npos && e.name.compare(slash, std::string::npos, "/archive_format") == 0)
        fail(KILN_ERROR_FORMAT, "'" + path +
                                    "' is a torch.export archive (torch.export.save, a .pt2 file), not a state_dict: "
                                    "save model.state_dict() with torch.save, or safetensors.torch.save_file");
    }
    fail(KILN_ERROR_FORMAT, "'" + path + "' is a zip archive but not a torch.save file: it has no <archive>/data.pkl");
  }
  const std::string prefix = pickle->name.substr(0, pickle->name.size() - std::string("data.pkl").size());
  if (zip_.find(prefix + "constants.pkl"))
    fail(KILN_ERROR_FORMAT, "'" + path +
                                "' is a TorchScript archive (torch.jit.save), not a state_dict: save "
                                "model.state_dict() with torch.save, or safetensors.torch.save_file");

  const ZipArchive::Entry *version = zip_.find(prefix + "version");
  if (!version) version = zip_.find(prefix + ".data/version");
  if (!version) error("it has no version record");
  std::string text = zip_.read_all(*version, kSmallRecord, "the version record");
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  uint64_t number = 0;
  bool digits = !text.empty() && text.size() <= 9;
  for (size_t i = 0; digits && i < text.size(); ++i) {
    digits = text[i] >= '0' && text[i] <= '9';
    number = number * 10 + uint64_t(text[i] - '0');
  }
  if (!digits || number < kMinVersion || number > kMaxVersion)
    error("its file format version " + quoted(text) + " is not one PyTorch's reader accepts (1 to 10)");

  if (const ZipArchive::Entry *order = zip_.find(prefix + "byteorder")) {
    const std::string value = zip_.read_all(*order, kSmallRecord, "the byteorder record");
    if (value != "little" && value != "big") error("its byteorder record says " + quoted(value) + ", not little or big");
    big_endian_ = value == "big";
  }

  const std::vector<PickledTensor> tensors =
      unpickle_state_dict(zip_.read_all(*pickle, kTorchPickleMaxBytes, "the state pickle"), path);
  views_.reserve(tensors.size());
  for (const PickledTensor &t : tensors) {
    const std::string named = "tensor " + quoted(t.name);
    check(t.supported, KILN_ERROR_DTYPE_MISMATCH,
          named + " in '" + path + "' is " + t.torch_dtype +
              "; kiln reads float32, float64, float16, bfloat16, int32, int64 and uint8 tensors");
    const ZipArchive::Entry *storage = zip_.find(prefix + "data/" + t.storage_key);
    if (!storage) error(named + "'s storage " + quoted(t.storage_key) + " is not in the archive");
    int64_t bytes;
    if (__builtin_mul_overflow(t.storage_numel, dtype_size(t.dtype), &bytes) || bytes != storage->size)
      error(named + "'s storage " + quoted(t.storage_key) + " holds " + std::to_string(storage->size) +
            " bytes, but " + std::to_string(t.storage_numel) + " elements of " + t.torch_dtype + " need " +
            (bytes >= 0 ? std::to_string(bytes) : std::string("more")));
    View v{};
    v.storage = storage;
    v.offset = t.offset;
    std::copy(std::begin(t.stride), std::end(t.stride), std::begin(v.stride));
    add_entry(Entry{t.name, t.dtype, t.size});
    views_.push_back(v);
  }
}

void TorchFile::read_into(const std::string &name, const Tensor &dst) const {
  const size_t at = check_destination(name, dst);
  const Shape &size = entries()[at].shape;
  const View &v = views_[at];
  const int64_t numel = size.numel(), esize = dtype_size(dst.dtype());
  if (numel == 0) return;

  // The elements the view spans, read in one go: [offset, last]. The pickle's
  // views were checked to lie inside their storages, so this cannot overflow.
  int64_t last = v.offset;
  for (int d = 0; d < size.ndim; ++d) last += (size[d] - 1) * v.stride[d];
  std::vector<char> span(size_t((last - v.offset + 1) * esize));
  zip_.read(*v.storage, v.offset * esize, int64_t(span.size()), span.data());

  // Gathered row by row (rows along the last dimension) unless already in
  // order; a 0-dimensional tensor is one row of one element.
  bool contiguous = true;
  int64_t expected = 1;
  for (int d = size.ndim - 1; d >= 0; expected *= size[d], --d)
    contiguous = contiguous && (size[d] == 1 || v.stride[d] == expected);
  std::vector<char> gathered;
  if (!contiguous) {
    gathered.resize(size_t(numel * esize));
    const int nd = size.ndim;
    const int64_t inner = size[nd - 1], inner_stride = v.stride[nd - 1];
    int64_t index[KILN_MAX_DIMS] = {}, base = 0;  // base: the row's first element, from offset
    char *out = gathered.data();
    for (int64_t row = 0; row < numel / inner; ++row) {
      const char *src = span.data() + base * esize;
      if (inner_stride == 1) {
        std::memcpy(out, src, size_t(inner * esize));
      } else {
        for (int64_t j = 0; j < inner; ++j) std::memcpy(out + j * esize, src + j * inner_stride * esize, size_t(esize));
      }
      out += inner * esize;
      for (int d = nd - 2; d >= 0; --d) {  // the next row: an odometer over the outer dimensions
        base += v.stride[d];
        if (++index[d] < size[d]) break;
        base -= index[d] * v.stride[d];
        index[d] = 0;
      }
    }
  }
  std::vector<char> &host = contiguous ? span : gathered;
  if (big_endian_ && esize > 1) swap_elements(host.data(), numel, esize);
  dst.copy_from_host(host.data(), numel * esize);
}

}  // namespace kiln::io
