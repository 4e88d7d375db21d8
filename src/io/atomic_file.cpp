// Atomic replacement by write-to-temporary + fsync + rename (POSIX rename is
// atomic within a file system, hence the temporary in the same directory).
#include "io/atomic_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>

#include "core/error.hpp"
#include "io/io_error.hpp"

namespace kiln::io {

namespace {

std::string directory_of(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// "<path>.tmp.<host>.": the prefix of this machine's temporaries of path.
// The host name keeps a writer on another machine sharing the directory (NFS)
// from being taken for a dead local one.
std::string temporary_prefix(const std::string &path) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  for (char *c = host; *c; ++c)
    if (*c == '/' || *c == '.') *c = '_';
  return path + ".tmp." + host + ".";
}

// Removes temporaries of path left by writers of this machine that died
// mid-save (kill -9, power loss): their names carry the writer's pid, and a
// pid with no live process cannot finish its rename. Best effort.
void remove_stale_temporaries(const std::string &path) {
  const std::string prefix = temporary_prefix(path);
  const std::string dir = directory_of(path);
  const std::string name_prefix = prefix.substr(prefix.find_last_of('/') + 1);
  // Closed however the loop ends: a name copy that runs out of memory throws.
  const std::unique_ptr<DIR, int (*)(DIR *)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return;
  while (const dirent *e = ::readdir(d.get())) {
    const std::string name = e->d_name;
    if (name.compare(0, name_prefix.size(), name_prefix) != 0) continue;
    char *end = nullptr;
    const long pid = std::strtol(name.c_str() + name_prefix.size(), &end, 10);
    if (pid <= 0 || *end != '.' || pid == long(getpid())) continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    ::unlinkat(::dirfd(d.get()), name.c_str(), 0);
  }
}

// The file a save of path replaces: path itself, or the file a symbolic link
// there points to (the link stays a link). Refuses anything but a regular
// file, so a save can never replace a device node, FIFO or directory.
std::string replace_target(const std::string &path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return path;  // a new file
    io_error("cannot write", path, errno);
  }
  std::string target = path;
  if (S_ISLNK(st.st_mode)) {
    char *resolved = ::realpath(path.c_str(), nullptr);
    if (!resolved) io_error("cannot write through the symbolic link", path, errno);
    target = resolved;
    std::free(resolved);
    if (::stat(target.c_str(), &st) != 0) io_error("cannot write", target, errno);
  }
  if (!S_ISREG(st.st_mode))
    fail(KILN_ERROR_IO, "cannot write '" + path + "': not a regular file (kiln replaces only regular files)");
  return target;
}

// Creates a new file named "<path>.tmp.<host>.<pid>.<random>" (O_EXCL, so it
// never reuses someone else's) and stores its name in *tmp_path.
int create_temporary(const std::string &path, std::string *tmp_path) {
  std::random_device device;
  const std::string prefix = temporary_prefix(path);
  for (int attempt = 0;; ++attempt) {
    uint64_t r = (uint64_t(device()) << 32) ^ device();
    *tmp_path = prefix + std::to_string(getpid()) + "." + std::to_string(r);
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

void write_file_atomically(const std::string &requested, const std::function<void(std::FILE *)> &write) {
  const std::string path = replace_target(requested);
  remove_stale_temporaries(path);
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
