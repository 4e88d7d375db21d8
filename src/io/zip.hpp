// Reading zip archives as torch.save writes them (PKWARE's APPNOTE 6.3.x):
// the end of central directory record, the zip64 records PyTorch always
// adds, the central directory, local headers, stored entries (PyTorch's
// own) and deflated ones (an archive repacked by another tool).
//
// Nothing in the archive is trusted: every count, offset and size is checked
// against the file's real size before it is used, so a hostile archive gives
// KILN_ERROR_FORMAT naming the file and the problem, never an over-read, and
// no allocation is made from a size the file does not back with bytes
// (a deflated entry may claim at most deflate's 1032:1 ratio). Split
// archives, encrypted entries and compression methods other than stored (0)
// and deflate (8) are refused. Opening is linear in the central directory.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/regular_file.hpp"

namespace kiln::io {

class ZipArchive {
 public:
  struct Entry {
    std::string name;
    uint16_t method = 0;  // 0 stored, 8 deflated
    uint32_t crc32 = 0;
    int64_t compressed_size = 0;
    int64_t size = 0;         // of the content, uncompressed
    int64_t data_offset = 0;  // of its first stored or compressed byte in the file
  };

  // Reads and checks the central directory and every local header of the
  // archive open as fd (file_size bytes; path for messages).
  ZipArchive(std::shared_ptr<FileDescriptor> fd, std::string path, int64_t file_size);
  ZipArchive(const ZipArchive &) = delete;
  ZipArchive &operator=(const ZipArchive &) = delete;

  const std::string &path() const { return path_; }
  // In central directory order.
  const std::vector<Entry> &entries() const { return entries_; }
  // The entry named name, or nullptr.
  const Entry *find(const std::string &name) const;

  // Bytes [offset, offset + n) of e's content into dst; the range must lie
  // inside the content (INTERNAL otherwise: callers check it first). A
  // stored entry is read in place, its CRC-32 checked when the range is the
  // whole entry; a deflated one is inflated whole on first use (CRC-32
  // checked) and kept for later reads. An archive whose every CRC-32 is 0
  // was written without them (PyTorch's compute_crc32 = False) and is read
  // unchecked, as torch.load reads it. Safe from several threads at once.
  void read(const Entry &e, int64_t offset, int64_t n, void *dst) const;
  // The whole content of e, refused with FORMAT naming `what` when it holds
  // more than limit bytes.
  std::string read_all(const Entry &e, int64_t limit, const std::string &what) const;

 private:
  [[noreturn]] void error(const std::string &problem) const;
  std::shared_ptr<const std::string> inflated(const Entry &e) const;

  std::shared_ptr<FileDescriptor> fd_;
  std::string path_;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
  bool crc_recorded_ = true;  // false: every record's CRC-32 is 0 (none written)
  mutable std::mutex mutex_;  // guards inflated_
  mutable std::unordered_map<const Entry *, std::shared_ptr<const std::string>> inflated_;
};

}  // namespace kiln::io
