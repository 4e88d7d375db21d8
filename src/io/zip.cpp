// Zip archive reading; see zip.hpp. Record layouts from APPNOTE 6.3.x,
// sections 4.3.7 (local header), 4.3.12 (central directory header), 4.3.14-16
// (zip64 end records and end of central directory) and 4.5.3 (zip64 extra).
#include "io/zip.hpp"

#include <zlib.h>

#include <algorithm>

#include "core/error.hpp"
#include "core/excerpt.hpp"
#include "io/byte_order.hpp"

namespace kiln::io {

namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50, kCentralHeaderSig = 0x02014b50, kEndSig = 0x06054b50,
                   kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr int64_t kLocalHeaderSize = 30, kCentralHeaderSize = 46, kEndSize = 22, kZip64EndSize = 56,
                  kZip64LocatorSize = 20, kMaxComment = 65535;
constexpr uint16_t kStored = 0, kDeflated = 8;
// Deflate cannot expand one input byte into more than 1032 output bytes
// (258-byte matches of at least 2 bits each); a larger claim is a lie.
constexpr int64_t kMaxDeflateRatio = 1032;

uint64_t le(const unsigned char *p, int n) { return load_le(p, n); }

}  // namespace

void ZipArchive::error(const std::string &problem) const {
  fail(KILN_ERROR_FORMAT, "zip archive '" + path_ + "': " + problem);
}

ZipArchive::ZipArchive(std::shared_ptr<FileDescriptor> fd, std::string path, int64_t file_size)
    : fd_(std::move(fd)), path_(std::move(path)) {
  const int raw = fd_->get();
  if (file_size < kEndSize)
    error("the file is " + std::to_string(file_size) + " bytes, too short for the end of central directory record");

  // The end record is the last 22 bytes plus a comment of up to 64 KiB: the
  // last signature whose comment reaches exactly to the end of the file.
  const int64_t tail_size = std::min(file_size, kEndSize + kMaxComment);
  std::vector<unsigned char> tail(static_cast<size_t>(tail_size));
  read_exactly(raw, path_, tail.data(), tail_size, file_size - tail_size);
  int64_t end_at = -1;
  for (int64_t i = tail_size - kEndSize; i >= 0; --i)
    if (le(&tail[size_t(i)], 4) == kEndSig && i + kEndSize + int64_t(le(&tail[size_t(i) + 20], 2)) == tail_size) {
      end_at = i;
      break;
    }
  if (end_at < 0) error("no end of central directory record (a truncated file?)");
  const unsigned char *end = &tail[size_t(end_at)];
  const int64_t end_offset = file_size - tail_size + end_at;
  uint64_t disk = le(end + 4, 2), cd_disk = le(end + 6, 2), disk_entries = le(end + 8, 2),
           total_entries = le(end + 10, 2), cd_size = le(end + 12, 4), cd_offset = le(end + 16, 4);

  // The zip64 locator sits right before the end record; PyTorch writes it
  // (and the zip64 end record it points to) into every archive.
  int64_t cd_limit = end_offset;  // the central directory ends before this
  if (end_offset >= kZip64LocatorSize) {
    unsigned char loc[kZip64LocatorSize];
    read_exactly(raw, path_, loc, kZip64LocatorSize, end_offset - kZip64LocatorSize);
    if (le(loc, 4) == kZip64LocatorSig) {
      const uint64_t z64_offset = le(loc + 8, 8);
      if (le(loc + 4, 4) != 0 || le(loc + 16, 4) != 1) error("split (multi-disk) archives are not supported");
      if (z64_offset > uint64_t(end_offset - kZip64LocatorSize - kZip64EndSize))
        error("the zip64 end record's offset " + std::to_string(z64_offset) + " is outside the file");
      unsigned char z64[kZip64EndSize];
      read_exactly(raw, path_, z64, kZip64EndSize, int64_t(z64_offset));
      if (le(z64, 4) != kZip64EndSig) error("no zip64 end record where the zip64 locator points");
      disk = le(z64 + 16, 4);
      cd_disk = le(z64 + 20, 4);
      disk_entries = le(z64 + 24, 8);
      total_entries = le(z64 + 32, 8);
      cd_size = le(z64 + 40, 8);
      cd_offset = le(z64 + 48, 8);
      cd_limit = int64_t(z64_offset);
    } else if (total_entries == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
      error("the end record defers to zip64 records that are missing");
    }
  }
  if (disk != 0 || cd_disk != 0 || disk_entries != total_entries)
    error("split (multi-disk) archives are not supported");
  if (cd_offset > uint64_t(cd_limit) || cd_size > uint64_t(cd_limit) - cd_offset)
    error("the central directory (offset " + std::to_string(cd_offset) + ", " + std::to_string(cd_size) +
          " bytes) runs past its end record at " + std::to_string(cd_limit));
  if (total_entries > cd_size / kCentralHeaderSize)
    error(std::to_string(total_entries) + " entries cannot fit in a central directory of " + std::to_string(cd_size) +
          " bytes");

  std::vector<unsigned char> cd(static_cast<size_t>(cd_size));
  read_exactly(raw, path_, cd.data(), int64_t(cd_size), int64_t(cd_offset));
  entries_.reserve(size_t(total_entries));
  size_t at = 0;
  for (uint64_t k = 0; k < total_entries; ++k) {
    const std::string where = "central directory entry " + std::to_string(k);
    if (cd.size() - at < size_t(kCentralHeaderSize)) error(where + " runs past the central directory");
    const unsigned char *h = &cd[at];
    if (le(h, 4) != kCentralHeaderSig) error(where + " has no central directory signature");
    const uint64_t flags = le(h + 8, 2), name_len = le(h + 28, 2), extra_len = le(h + 30, 2),
                   comment_len = le(h + 32, 2);
    if (cd.size() - at - kCentralHeaderSize < name_len + extra_len + comment_len)
      error(where + " runs past the central directory");
    Entry e;
    e.name.assign(reinterpret_cast<const char *>(h + kCentralHeaderSize), size_t(name_len));
    e.method = uint16_t(le(h + 10, 2));
    e.crc32 = uint32_t(le(h + 16, 4));
    uint64_t compressed = le(h + 20, 4), size = le(h + 24, 4), local = le(h + 42, 4), start_disk = le(h + 34, 2);
    const std::string named = "entry " + quoted(e.name);
    // The zip64 extra field holds, in this order, the fields set to all ones.
    const unsigned char *extra = h + kCentralHeaderSize + name_len;
    for (uint64_t x = 0; x + 4 <= extra_len;) {
      const uint64_t id = le(extra + x, 2), len = le(extra + x + 2, 2);
      if (len > extra_len - x - 4) error(named + " has an extra field running past its end");
      if (id == 0x0001) {
        const unsigned char *f = extra + x + 4;
        uint64_t used = 0;
        auto field = [&](uint64_t *v, int bytes) {
          if (used + uint64_t(bytes) > len) error(named + " has a zip64 extra field too short for its sizes");
          *v = le(f + used, bytes);
          used += uint64_t(bytes);
        };
        if (size == 0xffffffff) field(&size, 8);
        if (compressed == 0xffffffff) field(&compressed, 8);
        if (local == 0xffffffff) field(&local, 8);
        if (start_disk == 0xffff) field(&start_disk, 4);
      }
      x += 4 + len;
    }
    if (start_disk != 0) error(named + " starts on another disk: split archives are not supported");
    if (flags & 0x41) error(named + " is encrypted");
    if (e.method != kStored && e.method != kDeflated)
      error(named + " is compressed with method " + std::to_string(e.method) +
            "; kiln reads stored (0) and deflated (8) entries, as torch.save writes them");
    if (e.method == kStored && compressed != size)
      error(named + " is stored but its sizes differ (" + std::to_string(compressed) + " and " +
            std::to_string(size) + " bytes)");
    // Every local header and its data lie before the central directory.
    if (local > cd_offset || compressed > cd_offset || uint64_t(kLocalHeaderSize) > cd_offset - local)
      error(named + " has a local header at " + std::to_string(local) + " past the archive's data");
    if (e.method == kDeflated && size / uint64_t(kMaxDeflateRatio) > compressed + 1)
      error(named + " claims " + std::to_string(size) + " bytes from " + std::to_string(compressed) +
            " compressed ones, more than deflate can produce");

    unsigned char lh[kLocalHeaderSize];
    read_exactly(raw, path_, lh, kLocalHeaderSize, int64_t(local));
    if (le(lh, 4) != kLocalHeaderSig) error(named + " has no local header at " + std::to_string(local));
    const uint64_t local_name_len = le(lh + 26, 2), local_extra_len = le(lh + 28, 2);
    const uint64_t data = local + uint64_t(kLocalHeaderSize) + local_name_len + local_extra_len;
    if (le(lh + 8, 2) != e.method) error(named + " has another method in its local header");
    if (data > cd_offset || compressed > cd_offset - data)
      error(named + " (" + std::to_string(compressed) + " bytes at " + std::to_string(data) +
            ") runs into the central directory");
    std::string local_name(size_t(local_name_len), '\0');
    read_exactly(raw, path_, local_name.data(), int64_t(local_name_len), int64_t(local) + kLocalHeaderSize);
    if (local_name != e.name) error(named + " has another name in its local header: " + quoted(local_name));
    e.compressed_size = int64_t(compressed);
    e.size = int64_t(size);
    e.data_offset = int64_t(data);
    if (!index_.emplace(e.name, entries_.size()).second) error(named + " is in the archive twice");
    entries_.push_back(std::move(e));
    at += size_t(kCentralHeaderSize + name_len + extra_len + comment_len);
  }
  // torch.save with torch.utils.serialization.config.save.compute_crc32 =
  // False records 0 for every CRC-32, and torch.load checks none: such an
  // archive has no sums to check. Where any record has its sum, a 0 is one.
  crc_recorded_ = std::any_of(entries_.begin(), entries_.end(), [](const Entry &x) { return x.crc32 != 0; });
}

const ZipArchive::Entry *ZipArchive::find(const std::string &name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

std::shared_ptr<const std::string> ZipArchive::inflated(const Entry &e) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto cached = inflated_.find(&e);
  if (cached != inflated_.end()) return cached->second;

  const std::string named = "entry " + quoted(e.name);
  std::string compressed(size_t(e.compressed_size), '\0');
  read_exactly(fd_->get(), path_, compressed.data(), e.compressed_size, e.data_offset);
  auto out = std::make_shared<std::string>(size_t(e.size), '\0');

  z_stream zs{};
  const int init = inflateInit2(&zs, -MAX_WBITS);  // raw deflate: zip has no zlib header
  if (init == Z_MEM_ERROR) fail(KILN_ERROR_OUT_OF_MEMORY, "out of memory inflating " + named + " of '" + path_ + "'");
  if (init != Z_OK) fail(KILN_ERROR_INTERNAL, "inflateInit2 failed with " + std::to_string(init));
  struct End {
    z_stream *zs;
    ~End() { inflateEnd(zs); }
  } end{&zs};

  // zlib counts in uInt: feed both buffers in pieces of at most 1 GiB.
  constexpr int64_t kPiece = int64_t(1) << 30;
  int64_t in_done = 0, out_done = 0;
  unsigned char overflow = 0;  // where output beyond the declared size would go
  for (;;) {
    if (zs.avail_in == 0 && in_done < e.compressed_size) {
      const int64_t n = std::min(kPiece, e.compressed_size - in_done);
      zs.next_in = reinterpret_cast<Bytef *>(&compressed[size_t(in_done)]);
      zs.avail_in = uInt(n);
      in_done += n;
    }
    if (zs.avail_out == 0) {
      if (out_done < e.size) {
        const int64_t n = std::min(kPiece, e.size - out_done);
        zs.next_out = reinterpret_cast<Bytef *>(&(*out)[size_t(out_done)]);
        zs.avail_out = uInt(n);
        out_done += n;
      } else if (zs.next_out != &overflow) {
        zs.next_out = &overflow;
        zs.avail_out = 1;
      } else {
        error(named + " inflates to more than its declared " + std::to_string(e.size) + " bytes");
      }
    }
    const int rc = inflate(&zs, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) break;
    if (rc == Z_MEM_ERROR) fail(KILN_ERROR_OUT_OF_MEMORY, "out of memory inflating " + named + " of '" + path_ + "'");
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && in_done == e.compressed_size)
      error(named + "'s compressed data ends early");
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      error(named + " holds corrupt deflate data" + (zs.msg ? " (" + std::string(zs.msg) + ")" : std::string()));
  }
  if (zs.next_out == &overflow && zs.avail_out == 0)
    error(named + " inflates to more than its declared " + std::to_string(e.size) + " bytes");
  if (int64_t(zs.total_out) != e.size)
    error(named + " inflates to " + std::to_string(zs.total_out) + " bytes, not its declared " +
          std::to_string(e.size));
  const uint32_t crc = uint32_t(crc32_z(0, reinterpret_cast<const Bytef *>(out->data()), out->size()));
  if (crc_recorded_ && crc != e.crc32) error(named + " fails its CRC-32 check (the file is damaged)");
  inflated_.emplace(&e, out);
  return out;
}

void ZipArchive::read(const Entry &e, int64_t offset, int64_t n, void *dst) const {
  check(offset >= 0 && n >= 0 && offset <= e.size && n <= e.size - offset, KILN_ERROR_INTERNAL,
        "read of [" + std::to_string(offset) + ", +" + std::to_string(n) + ") outside entry " + quoted(e.name));
  if (n == 0) return;
  if (e.method == kDeflated) {
    const std::shared_ptr<const std::string> content = inflated(e);
    std::copy_n(content->data() + offset, size_t(n), static_cast<char *>(dst));
    return;
  }
  read_exactly(fd_->get(), path_, dst, n, e.data_offset + offset);
  if (crc_recorded_ && offset == 0 && n == e.size &&
      uint32_t(crc32_z(0, static_cast<const Bytef *>(dst), size_t(n))) != e.crc32)
    error("entry " + quoted(e.name) + " fails its CRC-32 check (the file is damaged)");
}

std::string ZipArchive::read_all(const Entry &e, int64_t limit, const std::string &what) const {
  if (e.size > limit)
    error(what + " " + quoted(e.name) + " is " + std::to_string(e.size) + " bytes, more than the " +
          std::to_string(limit) + " kiln reads");
  std::string content(size_t(e.size), '\0');
  read(e, 0, e.size, content.data());
  return content;
}

}  // namespace kiln::io
