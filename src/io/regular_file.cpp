#include "io/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/error.hpp"
#include "io/io_error.hpp"

namespace kiln::io {

int open_regular_file(const std::string &path) {
  // O_NONBLOCK: opening a FIFO with no writer returns at once instead of
  // waiting for one; the flag is dropped again for regular files.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) io_error("cannot open", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    io_error("cannot stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(KILN_ERROR_IO, "cannot read '" + path + "': not a regular file");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    io_error("cannot read", path, err);
  }
  return fd;
}

FileDescriptor::~FileDescriptor() { ::close(fd_); }

std::shared_ptr<FileDescriptor> open_shared_regular_file(const std::string &path) {
  const int fd = open_regular_file(path);
  try {
    return std::make_shared<FileDescriptor>(fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
}

void read_exactly(int fd, const std::string &path, void *dst, int64_t n, int64_t offset) {
  char *p = static_cast<char *>(dst);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, size_t(std::min<int64_t>(n, int64_t(1) << 30)), off_t(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      io_error("cannot read", path, errno);
    }
    if (got == 0) fail(KILN_ERROR_IO, "cannot read '" + path + "': the file ended early (was it truncated while open?)");
    p += got;
    n -= got;
    offset += got;
  }
}

}  // namespace kiln::io
