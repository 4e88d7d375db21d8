// safetensors reading (validating) and writing; see safetensors.hpp.
#include "io/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "core/context.hpp"
#include "core/excerpt.hpp"
#include "io/atomic_file.hpp"
#include "io/file_kind.hpp"
#include "io/io_error.hpp"
#include "io/json.hpp"
#include "io/tensor_file.hpp"
#include "io/regular_file.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian and is read and written without swapping");

namespace kiln::io {

namespace {

struct DTypeName {
  DType dtype;
  const char *name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::F32, "F32"}, {DType::F16, "F16"}, {DType::BF16, "BF16"}, {DType::F64, "F64"},
    {DType::I32, "I32"}, {DType::I64, "I64"}, {DType::U8, "U8"},
};

const char *safetensors_name(DType d) {
  for (const DTypeName &n : kDTypeNames)
    if (n.dtype == d) return n.name;
  fail(KILN_ERROR_INTERNAL, "dtype " + std::string(dtype_name(d)) + " has no safetensors name");
}

}  // namespace

namespace {

// Validation of the parsed header, with messages naming the file.
class HeaderReader {
 public:
  HeaderReader(const std::string &path, int64_t header_end, int64_t data_size)
      : path_(path), header_end_(header_end), data_size_(data_size) {}

  [[noreturn]] void error(const std::string &problem) const {
    fail(KILN_ERROR_FORMAT, "safetensors file '" + path_ + "': " + problem);
  }

  void read_metadata(const json::Value &v, std::map<std::string, std::string> *out) const {
    if (v.kind != json::Value::Kind::Object)
      error("\"__metadata__\" must be an object, not an " + std::string(json::kind_name(v.kind)));
    for (size_t i = 0; i < v.keys.size(); ++i) {
      if (v.items[i].kind != json::Value::Kind::String)
        error("\"__metadata__\" must map strings to strings, but \"" + excerpt(v.keys[i]) + "\" is an " +
              json::kind_name(v.items[i].kind));
      (*out)[v.keys[i]] = v.items[i].string;
    }
  }

  SafetensorsFile::Entry read_entry(const std::string &name, const json::Value &v) const {
    const std::string where = "tensor \"" + excerpt(name) + "\"";
    if (v.kind != json::Value::Kind::Object)
      error(where + " must be described by an object, not an " + std::string(json::kind_name(v.kind)));
    for (const std::string &key : v.keys)
      if (key != "dtype" && key != "shape" && key != "data_offsets")
        error(where + " has an unknown field \"" + excerpt(key) + "\"");
    const json::Value *dtype = v.find("dtype"), *shape = v.find("shape"), *offsets = v.find("data_offsets");
    if (!dtype || !shape || !offsets) error(where + " needs \"dtype\", \"shape\" and \"data_offsets\"");

    SafetensorsFile::Entry e;
    e.name = name;
    if (dtype->kind != json::Value::Kind::String) error(where + ": \"dtype\" must be a string");
    bool known = false;
    for (const DTypeName &n : kDTypeNames)
      if (dtype->string == n.name) {
        e.dtype = n.dtype;
        known = true;
      }
    if (!known)
      error(where + " has unsupported dtype \"" + excerpt(dtype->string) + "\" (kiln reads F32, F16, BF16, F64, I32, I64, U8)");

    if (shape->kind != json::Value::Kind::Array) error(where + ": \"shape\" must be an array of integers");
    if (shape->items.size() > size_t(KILN_MAX_DIMS))
      error(where + " has " + std::to_string(shape->items.size()) + " dimensions; kiln supports at most " +
            std::to_string(KILN_MAX_DIMS));
    // numel * dtype size, overflow-checked: the dims come from the file. The
    // product of the non-zero sizes must fit too (as Shape::from requires),
    // so that no later product over a subset of the dimensions overflows.
    int64_t nonzero_bytes = dtype_size(e.dtype);
    bool empty = false;
    for (const json::Value &d : shape->items) {
      if (d.kind != json::Value::Kind::Integer || d.integer < 0)
        error(where + ": \"shape\" must hold non-negative integers");
      e.shape.d[e.shape.ndim++] = d.integer;
    }
    for (int64_t i = 0; i < e.shape.ndim; ++i) {  // after: the message names the whole shape
      if (e.shape.d[i] == 0) empty = true;
      else if (__builtin_mul_overflow(nonzero_bytes, e.shape.d[i], &nonzero_bytes))
        error(where + ": shape " + e.shape.str() + " is too large");
    }
    const int64_t bytes = empty ? 0 : nonzero_bytes;

    if (offsets->kind != json::Value::Kind::Array || offsets->items.size() != 2 ||
        offsets->items[0].kind != json::Value::Kind::Integer || offsets->items[1].kind != json::Value::Kind::Integer)
      error(where + ": \"data_offsets\" must be an array of two integers");
    int64_t begin = offsets->items[0].integer, end = offsets->items[1].integer;
    if (begin < 0 || end < begin)
      error(where + " has invalid data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]");
    if (end > data_size_)
      error(where + " has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
            "] past the end of the data section (" + std::to_string(data_size_) + " bytes)");
    if (end - begin != bytes)
      error(where + " of dtype " + dtype->string + " and shape " + e.shape.str() + " needs " + std::to_string(bytes) +
            " bytes but data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] hold " +
            std::to_string(end - begin));
    e.offset = header_end_ + begin;
    e.size = bytes;
    return e;
  }

  // The format requires the tensors to cover the data section exactly, in
  // offset order: no holes (hidden data) and no overlaps (aliasing).
  void check_coverage(std::vector<SafetensorsFile::Entry> *entries) const {
    std::stable_sort(entries->begin(), entries->end(), [](const auto &a, const auto &b) {
      return a.offset != b.offset ? a.offset < b.offset : a.size < b.size;
    });
    int64_t expected = header_end_;
    for (const SafetensorsFile::Entry &e : *entries) {
      if (e.offset < expected)
        error("tensor \"" + excerpt(e.name) + "\" overlaps the tensor before it (data offset " +
              std::to_string(e.offset - header_end_) + ", expected " + std::to_string(expected - header_end_) + ")");
      if (e.offset > expected)
        error("the data section has a hole before tensor \"" + excerpt(e.name) + "\" (data offset " +
              std::to_string(e.offset - header_end_) + ", expected " + std::to_string(expected - header_end_) + ")");
      expected = e.offset + e.size;
    }
    if (expected != header_end_ + data_size_)
      error("the tensors cover " + std::to_string(expected - header_end_) + " bytes but the data section holds " +
            std::to_string(data_size_));
  }

 private:
  const std::string &path_;
  int64_t header_end_, data_size_;
};

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string &path) {
  SafetensorsFile file;
  file.path_ = path;
  file.fd_ = open_shared_regular_file(path);
  const int raw_fd = file.fd_->get();

  struct stat st;
  if (::fstat(raw_fd, &st) != 0) io_error("cannot stat", path, errno);
  const int64_t file_size = st.st_size;
  auto error = [&](const std::string &problem) {
    fail(KILN_ERROR_FORMAT, "safetensors file '" + path + "': " + problem);
  };
  // Another format (a torch.save zip, an empty file) gets a sentence saying
  // what it is instead of a complaint about its "header length".
  const FileKind kind = file_kind(raw_fd, path, file_size);
  if (kind != FileKind::kOther) fail(KILN_ERROR_FORMAT, not_safetensors_reason(kind, path));
  if (file_size < 8)
    error("the file is " + std::to_string(file_size) + " bytes, too short for the 8-byte header length");

  unsigned char len_bytes[8];
  read_exactly(raw_fd, path, len_bytes, 8, 0);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kSafetensorsMaxHeader)
    error("header length " + std::to_string(header_len) + " exceeds the limit of " +
          std::to_string(kSafetensorsMaxHeader) + " bytes");
  if (header_len > uint64_t(file_size - 8))
    error("header length " + std::to_string(header_len) + " runs past the end of the file (" +
          std::to_string(file_size) + " bytes)");
  if (header_len < 2) error("header length " + std::to_string(header_len) + " is too short for a JSON object");

  std::string header(size_t(header_len), '\0');
  read_exactly(raw_fd, path, header.data(), int64_t(header_len), 8);
  if (header[0] != '{') error("the header does not start with '{'");
  json::Value root = json::parse(header, "safetensors file '" + path + "': header");
  if (root.kind != json::Value::Kind::Object) error("the header is not a JSON object");

  const int64_t header_end = 8 + int64_t(header_len);
  HeaderReader reader(path, header_end, file_size - header_end);
  for (size_t i = 0; i < root.keys.size(); ++i) {
    if (root.keys[i] == "__metadata__")
      reader.read_metadata(root.items[i], &file.metadata_);
    else
      file.entries_.push_back(reader.read_entry(root.keys[i], root.items[i]));
  }
  reader.check_coverage(&file.entries_);
  file.index_.reserve(file.entries_.size());
  for (size_t i = 0; i < file.entries_.size(); ++i) file.index_.emplace(file.entries_[i].name, i);
  return file;
}

const SafetensorsFile::Entry *SafetensorsFile::find(const std::string &name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

void SafetensorsFile::read_into(const std::string &name, const Tensor &dst) const {
  const Entry *e = find(name);
  check_read_destination("safetensors", path_, name, e != nullptr, e ? e->dtype : DType::F32,
                         e ? e->shape : Shape(), dst);
  if (e->size == 0) return;
  if (dst.device().is_cpu()) {
    read_exactly(fd_->get(), path_, dst.data(), e->size, e->offset);
  } else {
    std::vector<char> host(static_cast<size_t>(e->size));
    read_exactly(fd_->get(), path_, host.data(), e->size, e->offset);
    dst.copy_from_host(host.data(), e->size);
  }
}

Tensor SafetensorsFile::read(const std::string &name, const std::shared_ptr<Context> &ctx, Device device) const {
  const Entry *e = find(name);
  check(e != nullptr, KILN_ERROR_INVALID_ARGUMENT,
        "safetensors file '" + path_ + "' has no tensor named \"" + name + "\"");
  Tensor t = Tensor::empty(ctx, e->shape, e->dtype, device);
  read_into(name, t);
  return t;
}

void write_safetensors(const std::string &path, const std::vector<std::pair<std::string, Tensor>> &tensors,
                       const std::map<std::string, std::string> &metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto &[key, value] : metadata) {
      header += (first ? "" : ",") + json::quote(key) + ":" + json::quote(value);
      first = false;
    }
    header += "}";
  }
  std::set<std::string> names;
  int64_t offset = 0, largest = 0;
  for (const auto &[name, t] : tensors) {
    check(!name.empty() && name != "__metadata__", KILN_ERROR_INVALID_ARGUMENT,
          "cannot save a tensor named \"" + name + "\" to '" + path + "'");
    check(names.insert(name).second, KILN_ERROR_INVALID_ARGUMENT,
          "two tensors named \"" + name + "\" to save to '" + path + "'");
    check(t.defined(), KILN_ERROR_INVALID_ARGUMENT, "tensor \"" + name + "\" to save is undefined");
    if (header.size() > 1) header += ",";
    header += json::quote(name) + ":{\"dtype\":\"" + safetensors_name(t.dtype()) + "\",\"shape\":[";
    for (int i = 0; i < t.ndim(); ++i) header += (i ? "," : "") + std::to_string(t.dim(i));
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.nbytes()) + "]}";
    offset += t.nbytes();
    largest = std::max(largest, t.nbytes());
  }
  header += "}";
  // Spaces up to a multiple of 8 keep the data section 8-byte aligned.
  header.append((8 - header.size() % 8) % 8, ' ');

  std::vector<char> host(static_cast<size_t>(largest));
  write_file_atomically(path, [&](std::FILE *f) {
    unsigned char len[8];
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    std::fwrite(len, 1, 8, f);
    std::fwrite(header.data(), 1, header.size(), f);
    for (const auto &entry : tensors) {
      const Tensor &t = entry.second;
      if (t.nbytes() == 0) continue;
      t.copy_to_host(host.data(), t.nbytes());
      if (std::fwrite(host.data(), 1, size_t(t.nbytes()), f) != size_t(t.nbytes())) return;  // ferror reports it
    }
  });
}

}  // namespace kiln::io
