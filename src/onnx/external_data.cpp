#include "onnx/external_data.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <new>

#include "core/error.hpp"
#include "core/excerpt.hpp"
#include "io/io_error.hpp"
#include "io/sha1.hpp"
#include "onnx/plugin/common.hpp"

namespace kiln {

namespace {

std::string folder_of(const std::string &path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// realpath(3), or IO naming what it was for.
std::string real_path(const std::string &path, const std::string &what) {
  char *resolved = ::realpath(path.c_str(), nullptr);
  if (!resolved) io::io_error("cannot open " + what, path, errno);
  std::string out(resolved);
  std::free(resolved);
  return out;
}

// Runs fn, turning what it throws into a status and reason for the plugin.
template <class F> kiln_status to_status(char *reason, int64_t reason_size, F &&fn) {
  try {
    fn();
    return KILN_OK;
  } catch (const Error &e) {
    return onnx_plugin::refuse(e.status(), e.what(), reason, reason_size);
  } catch (const std::bad_alloc &) {
    return onnx_plugin::refuse(KILN_ERROR_OUT_OF_MEMORY, "out of host memory reading external data", reason,
                               reason_size);
  } catch (const std::exception &e) {
    return onnx_plugin::refuse(KILN_ERROR_INTERNAL, e.what(), reason, reason_size);
  }
}

}  // namespace

std::string resolve_external_location(const std::string &folder, const std::string &location) {
  const std::string what = "external data " + quoted(location, 200);
  check(!location.empty(), KILN_ERROR_FORMAT, "the external data's location is empty");
  check(location.find('\0') == std::string::npos, KILN_ERROR_FORMAT, what + " holds a NUL byte");
  check(location[0] != '/', KILN_ERROR_FORMAT,
        what + " is an absolute path; kiln reads external data only from the model's folder");
  for (size_t start = 0; start <= location.size();) {
    size_t end = location.find('/', start);
    if (end == std::string::npos) end = location.size();
    check(location.compare(start, end - start, "..") != 0, KILN_ERROR_FORMAT,
          what + " goes up a folder (\"..\"); kiln reads external data only from the model's folder");
    start = end + 1;
  }
  const std::string path = folder + "/" + location;
  // Symbolic links are followed, but must lead to a file in the folder.
  const std::string real_folder = real_path(folder, "the model's folder");
  const std::string real_file = real_path(path, what);
  const std::string inside = real_folder == "/" ? "/" : real_folder + "/";
  check(real_file.compare(0, inside.size(), inside) == 0, KILN_ERROR_FORMAT,
        what + " leads out of the model's folder (to " + quoted(real_file, 200) +
            ", through a symbolic link); kiln reads external data only from the model's folder");
  return real_file;
}

ExternalDataReader::ExternalDataReader(const std::string &model_path)
    : model_path_(model_path), folder_(folder_of(model_path)) {}

ExternalDataReader::File &ExternalDataReader::open(const std::string &location) {
  auto it = files_.find(location);
  if (it != files_.end()) return it->second;
  File f;
  f.path = resolve_external_location(folder_, location);
  f.fd = io::open_shared_regular_file(f.path);
  struct stat st {};
  if (::fstat(f.fd->get(), &st) != 0) io::io_error("cannot stat", f.path, errno);
  f.size = int64_t(st.st_size);
  return files_.emplace(location, std::move(f)).first->second;
}

int64_t ExternalDataReader::file_size(const std::string &location) { return open(location).size; }

std::string ExternalDataReader::read(const OnnxExternalRef &ref) {
  File &f = open(ref.location);
  check(ref.offset >= 0 && ref.bytes >= 0 && ref.offset <= f.size && ref.bytes <= f.size - ref.offset,
        KILN_ERROR_FORMAT,
        "the model reads " + std::to_string(ref.bytes) + " bytes at offset " + std::to_string(ref.offset) + " of " +
            quoted(ref.location, 200) + ", which holds " + std::to_string(f.size) + " bytes");
  if (!ref.checksum.empty()) {
    if (f.sha1.empty()) f.sha1 = io::sha1_of_file(f.fd->get(), f.path, f.size);
    std::string want = ref.checksum;
    for (char &c : want) c = char(c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c);
    check(want == f.sha1, KILN_ERROR_FORMAT,
          quoted(ref.location, 200) + " has SHA-1 " + f.sha1 + " but the model records the checksum " +
              quoted(ref.checksum, 80) + ": it is not the data file this model was written with");
  }
  std::string bytes(size_t(ref.bytes), '\0');
  io::read_exactly(f.fd->get(), f.path, bytes.data(), ref.bytes, ref.offset);
  return bytes;
}

OnnxExternalReader ExternalDataReader::plugin_reader() {
  OnnxExternalReader r;
  r.user = this;
  r.file_size = [](void *user, const std::string &location, int64_t *bytes, char *reason, int64_t reason_size) {
    return to_status(reason, reason_size,
                     [&] { *bytes = static_cast<ExternalDataReader *>(user)->file_size(location); });
  };
  r.read = [](void *user, const OnnxExternalRef &ref, std::string *out, char *reason, int64_t reason_size) {
    return to_status(reason, reason_size, [&] { *out = static_cast<ExternalDataReader *>(user)->read(ref); });
  };
  return r;
}

bool onnx_needs_external_data(int64_t parameter_bytes, int64_t layers) {
  // What a model file holds besides the parameters' bytes: node, initializer
  // and value names and attributes, well under 1 KiB a layer, and the header.
  constexpr int64_t kPerLayer = 1024, kFixed = 64 * 1024;
  return parameter_bytes > KILN_ONNX_MAX_FILE_BYTES - kFixed - kPerLayer * layers;
}

std::string external_data_location(const std::string &path) {
  const size_t slash = path.rfind('/');
  return (slash == std::string::npos ? path : path.substr(slash + 1)) + ".data";
}

}  // namespace kiln
