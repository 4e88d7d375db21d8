// kiln::Error: the one exception type inside kiln. The C API layer turns it
// into a kiln_status and the thread-local last-error message. Its virtual
// destructor is defined in error.cpp, so its type information exists once,
// in libkiln, and the plugins that throw it (CUDA, distributed) use that one
// through libkiln's private symbols (docs/plugins.md): a catch in libkiln
// matches what a plugin throws by identity, not by name.
#pragma once

#include <stdexcept>
#include <string>

#include "kiln/kiln.h"

namespace kiln {

class Error : public std::runtime_error {
 public:
  Error(kiln_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
  ~Error() override;
  kiln_status status() const noexcept { return status_; }

 private:
  kiln_status status_;
};

[[noreturn]] inline void fail(kiln_status status, const std::string &message) { throw Error(status, message); }

// Throws Error(status, message) unless cond holds. The message is built
// before the call, whether cond holds or not: for setup and per-call checks.
inline void check(bool cond, kiln_status status, const std::string &message) {
  if (!cond) fail(status, message);
}

// check() for hot paths (every training step, every replica's step): the
// message expression (the arguments after status, which may hold commas)
// is evaluated only when cond fails, so a check that passes formats nothing
// and allocates nothing.
#define KILN_CHECK(cond, status, ...)                  \
  do {                                                 \
    if (!(cond)) ::kiln::fail((status), (__VA_ARGS__)); \
  } while (0)

}  // namespace kiln
