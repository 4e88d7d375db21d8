// kiln::Error: the one exception type inside kiln. The C API layer turns it
// into a kiln_status and the thread-local last-error message. Header-only on
// purpose: the CUDA plugin throws it too, and GCC matches the type across the
// two libraries by its name.
#pragma once

#include <stdexcept>
#include <string>

#include "kiln/kiln.h"

namespace kiln {

class Error : public std::runtime_error {
 public:
  Error(kiln_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
  kiln_status status() const noexcept { return status_; }

 private:
  kiln_status status_;
};

[[noreturn]] inline void fail(kiln_status status, const std::string &message) { throw Error(status, message); }

// Throws INVALID_ARGUMENT with message unless cond holds.
inline void check(bool cond, kiln_status status, const std::string &message) {
  if (!cond) fail(status, message);
}

}  // namespace kiln
