// Opening files kiln reads (models, checkpoints, datasets) without the
// surprises of special files: a FIFO would block open() forever and a device
// node could be read without end, so both are refused before any read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace kiln::io {

// Opens path read-only (close-on-exec) and returns the descriptor, after
// checking it is a regular file (symbolic links followed). Throws
// KILN_ERROR_IO naming path: "cannot open" with strerror, or "not a regular
// file" at once for FIFOs, sockets, directories and device nodes.
int open_regular_file(const std::string &path);

// A descriptor open_regular_file returned, closed when its owner goes; the
// readers share one between copies of a file object through a shared_ptr
// (open_shared_regular_file).
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor();
  FileDescriptor(const FileDescriptor &) = delete;
  FileDescriptor &operator=(const FileDescriptor &) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// open_regular_file's descriptor, owned from the start: it is closed, not
// leaked, when allocating its owner fails (OUT_OF_MEMORY).
std::shared_ptr<FileDescriptor> open_shared_regular_file(const std::string &path);

// Reads exactly n bytes at offset of fd (opened from path), retrying short
// reads. The caller validated n and offset against the file's size, so an
// early end means the file changed under it: KILN_ERROR_IO, like any read
// error, naming path.
void read_exactly(int fd, const std::string &path, void *dst, int64_t n, int64_t offset);

}  // namespace kiln::io
