#include "io/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

}  // namespace kiln::io
