// IDX reading, raw or gzip, through one zlib stream (gzread passes raw files
// through unchanged), with every size checked before it is trusted.
#include "io/idx.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/context.hpp"
#include "io/io_error.hpp"
#include "io/regular_file.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "IDX elements are byte-swapped from big-endian");

namespace kiln::io {

namespace {

// Deflate cannot expand data by more than about 1032:1, so a gzip file of
// M bytes cannot hold more than this many times M bytes of IDX data.
constexpr int64_t kMaxDeflateRatio = 1032;

struct IdxType {
  unsigned char code;
  const char *name;
  int64_t size;  // bytes per element in the file
  DType dtype;   // what kiln stores
};
constexpr IdxType kIdxTypes[] = {
    {0x08, "u8", 1, DType::U8},   {0x09, "i8", 1, DType::I32},  {0x0B, "i16", 2, DType::I32},
    {0x0C, "i32", 4, DType::I32}, {0x0D, "f32", 4, DType::F32}, {0x0E, "f64", 8, DType::F64},
};

std::string hex(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", v);
  return buf;
}

// A zlib read stream over an open file descriptor, closed on destruction.
class GzReader {
 public:
  GzReader(const std::string &path, int fd) : path_(path) {
    gz_ = gzdopen(fd, "rb");
    if (!gz_) {
      ::close(fd);
      fail(KILN_ERROR_OUT_OF_MEMORY, "cannot allocate a zlib stream to read '" + path + "'");
    }
    gzbuffer(gz_, 1 << 17);
  }
  ~GzReader() { gzclose_r(gz_); }
  GzReader(const GzReader &) = delete;
  GzReader &operator=(const GzReader &) = delete;

  // Reads up to n bytes; fewer only at the end of the data.
  int64_t read(void *dst, int64_t n) {
    char *p = static_cast<char *>(dst);
    int64_t done = 0;
    while (done < n) {
      unsigned chunk = unsigned(std::min<int64_t>(n - done, int64_t(1) << 30));
      int got = gzread(gz_, p + done, chunk);
      if (got < 0) raise();
      if (got == 0) break;
      done += got;
    }
    return done;
  }

  // True when the stream ended because the compressed data was cut short.
  bool truncated() const {
    int err = Z_OK;
    gzerror(gz_, &err);
    return err == Z_BUF_ERROR;
  }

 private:
  [[noreturn]] void raise() const {
    int err = Z_OK;
    const char *message = gzerror(gz_, &err);
    if (err == Z_ERRNO) io_error("cannot read", path_, errno);
    if (err == Z_MEM_ERROR) fail(KILN_ERROR_OUT_OF_MEMORY, "out of memory decompressing '" + path_ + "'");
    fail(KILN_ERROR_FORMAT, "IDX file '" + path_ + "': corrupt gzip data (" + message + ")");
  }

  const std::string &path_;
  gzFile gz_ = nullptr;
};

template <class T> void swap_in_place(void *data, int64_t n) {
  T *p = static_cast<T *>(data);
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (sizeof(T) == 2) p[i] = __builtin_bswap16(p[i]);
    if constexpr (sizeof(T) == 4) p[i] = __builtin_bswap32(p[i]);
    if constexpr (sizeof(T) == 8) p[i] = __builtin_bswap64(p[i]);
  }
}

}  // namespace

Tensor read_idx(const std::string &path, const std::shared_ptr<Context> &ctx) {
  auto format_error = [&](const std::string &problem) { fail(KILN_ERROR_FORMAT, "IDX file '" + path + "': " + problem); };

  int fd = open_regular_file(path);
  auto read_error = [&](int err) {
    ::close(fd);
    io_error("cannot read", path, err);
  };
  struct stat st;
  if (::fstat(fd, &st) != 0) read_error(errno);
  unsigned char magic[2] = {0, 0};
  if (::pread(fd, magic, 2, 0) < 0) read_error(errno);
  const bool gzip = magic[0] == 0x1f && magic[1] == 0x8b;
  const int64_t file_size = st.st_size;
  GzReader in(path, fd);

  unsigned char head[4];
  if (in.read(head, 4) != 4) format_error("the file is too short for an IDX header");
  if (head[0] != 0 || head[1] != 0)
    format_error("not an IDX file (magic bytes " + hex(head[0]) + " " + hex(head[1]) + ", expected 0x00 0x00)");
  const IdxType *type = nullptr;
  for (const IdxType &t : kIdxTypes)
    if (t.code == head[2]) type = &t;
  if (!type) format_error("unknown element type " + hex(head[2]));
  const int ndim = head[3];
  if (ndim < 1 || ndim > KILN_MAX_DIMS)
    format_error("has " + std::to_string(ndim) + " dimensions; kiln reads 1 to " + std::to_string(KILN_MAX_DIMS));

  unsigned char dims[4 * KILN_MAX_DIMS];
  if (in.read(dims, 4 * ndim) != 4 * ndim) format_error("the header is truncated in its dimensions");
  Shape shape;
  // The product of the non-zero sizes, in bytes of the wider of the file's
  // element and kiln's (i8/i16 are widened to i32), must fit in int64 (as
  // Shape::from requires), so that no later product over a subset of the
  // dimensions, nor the widened tensor's size, can overflow.
  int64_t nonzero_count = 1, widest_bytes = 0;
  bool overflow = false, empty = false;
  for (int i = 0; i < ndim; ++i) {
    const unsigned char *b = dims + 4 * i;
    int64_t d = (int64_t(b[0]) << 24) | (int64_t(b[1]) << 16) | (int64_t(b[2]) << 8) | int64_t(b[3]);
    shape.d[shape.ndim++] = d;
    if (d == 0) empty = true;
    else overflow = overflow || __builtin_mul_overflow(nonzero_count, d, &nonzero_count);
  }
  overflow = overflow || __builtin_mul_overflow(nonzero_count, std::max(type->size, dtype_size(type->dtype)),
                                                &widest_bytes);
  if (overflow) format_error("dimensions " + shape.str() + " describe more data than fits in 64 bits");
  const int64_t expected = empty ? 0 : nonzero_count * type->size;

  // Reject sizes the file cannot hold before allocating anything.
  const int64_t header_size = 4 + 4 * int64_t(ndim);
  if (!gzip && file_size - header_size < expected)
    format_error("dimensions " + shape.str() + " need " + std::to_string(expected) + " bytes of data, found " +
                 std::to_string(file_size - header_size));
  if (!gzip && file_size - header_size > expected)
    format_error("trailing data: dimensions " + shape.str() + " need " + std::to_string(expected) +
                 " bytes of data, found " + std::to_string(file_size - header_size));
  if (gzip && expected / kMaxDeflateRatio > file_size)
    format_error("dimensions " + shape.str() + " need " + std::to_string(expected) +
                 " bytes of data, more than a gzip file of " + std::to_string(file_size) + " bytes can hold");

  const int64_t numel = expected / type->size;
  Tensor t = Tensor::empty(ctx, shape, type->dtype, Device::cpu());
  // i8 and i16 are widened, so they go through a staging buffer; the other
  // types have the same size in kiln and are read in place.
  std::vector<unsigned char> staging;
  void *dst = t.data();
  if (type->size != dtype_size(type->dtype)) {
    staging.resize(size_t(expected));
    dst = staging.data();
  }
  int64_t got = in.read(dst, expected);
  if (got != expected)
    format_error("dimensions " + shape.str() + " need " + std::to_string(expected) + " bytes of data, found " +
                 std::to_string(got) + (in.truncated() ? " (the gzip stream is truncated)" : ""));
  unsigned char extra;
  if (in.read(&extra, 1) != 0)
    format_error("trailing data after the " + std::to_string(expected) + " bytes of data its dimensions " +
                 shape.str() + " need");

  switch (type->code) {
    case 0x09: {
      const int8_t *s = reinterpret_cast<const int8_t *>(staging.data());
      int32_t *o = t.data_as<int32_t>();
      for (int64_t i = 0; i < numel; ++i) o[i] = s[i];
      break;
    }
    case 0x0B: {
      int32_t *o = t.data_as<int32_t>();
      for (int64_t i = 0; i < numel; ++i) o[i] = int16_t(uint16_t(staging[2 * i] << 8 | staging[2 * i + 1]));
      break;
    }
    case 0x0C: case 0x0D: swap_in_place<uint32_t>(t.data(), numel); break;
    case 0x0E: swap_in_place<uint64_t>(t.data(), numel); break;
    default: break;  // u8: nothing to convert
  }
  return t;
}

}  // namespace kiln::io
