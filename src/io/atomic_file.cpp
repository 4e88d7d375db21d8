// Atomic replacement by write-to-temporary + fsync + rename (POSIX rename is
// atomic within a file system, hence the temporary in the same directory).
#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "core/error.hpp"

namespace kiln::io {

namespace {

[[noreturn]] void io_error(const std::string &what, const std::string &path, int err) {
  fail(KILN_ERROR_IO, what + " '" + path + "': " + std::strerror(err));
}

std::string directory_of(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Creates a new file named path + ".tmp.<pid>.<random>" (O_EXCL, so it never
// reuses someone else's) and stores its name in *tmp_path.
int create_temporary(const std::string &path, std::string *tmp_path) {
  std::random_device device;
  for (int attempt = 0;; ++attempt) {
    uint64_t r = (uint64_t(device()) << 32) ^ device();
    *tmp_path = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(r);
    int fd = ::open(tmp_path->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return fd;
    if (errno != EEXIST || attempt == 16) io_error("cannot create a temporary file to write", path, errno);
  }
}

// fsync of the directory makes the rename durable; file systems that cannot
// sync a directory say EINVAL, and there is nothing more to do on them.
void sync_directory(const std::string &path) {
  std::string dir = directory_of(path);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) io_error("cannot open the directory to sync it after writing", path, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) io_error("cannot sync the directory after writing", path, err);
}

}  // namespace

void write_file_atomically(const std::string &path, const std::function<void(std::FILE *)> &write) {
  std::string tmp;
  int fd = create_temporary(path, &tmp);
  std::FILE *f = ::fdopen(fd, "wb");
  if (!f) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    io_error("cannot write", path, err);
  }
  // From here on every failure closes f (if still open) and removes tmp.
  try {
    errno = 0;
    write(f);
    if (std::fflush(f) != 0 || std::ferror(f)) io_error("cannot write", path, errno ? errno : EIO);
    if (::fsync(::fileno(f)) != 0) io_error("cannot sync", path, errno);
    std::FILE *closing = f;
    f = nullptr;  // fclose releases the stream even when it fails
    if (std::fclose(closing) != 0) io_error("cannot write (close failed)", path, errno);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) io_error("cannot replace", path, errno);
  } catch (...) {
    if (f) std::fclose(f);
    ::unlink(tmp.c_str());
    throw;
  }
  sync_directory(path);
}

}  // namespace kiln::io
