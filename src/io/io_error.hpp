// The error for a failed system call on a file, shared by kiln's readers and
// writers.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.hpp"

namespace kiln::io {

// Throws "<what> '<path>': <strerror(err)>" as KILN_ERROR_OUT_OF_MEMORY when
// the system ran out of memory for the call (ENOMEM: fdopen's FILE, stdio's
// buffer, realpath's result, the kernel's own), else as KILN_ERROR_IO.
[[noreturn]] inline void io_error(const std::string &what, const std::string &path, int err) {
  fail(err == ENOMEM ? KILN_ERROR_OUT_OF_MEMORY : KILN_ERROR_IO, what + " '" + path + "': " + std::strerror(err));
}

}  // namespace kiln::io
