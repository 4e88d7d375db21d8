// What the C++ tests over kiln_internal share (backend_test.cpp,
// program_test.cpp, cuda_planning_test.cpp, async_copies_test.cpp,
// formulas_test.cpp): CHECK and expect, which count failures and name the
// running case, finish, which ends a main with their verdict, the status a
// throwing call ends with, and a main that runs a suite on
// the CPU and on CUDA when usable, honouring KILN_TEST_DEVICE (cpu: the CPU
// half only; cuda: the CUDA half only, exit 77 without a usable device).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "backend/registry.hpp"
#include "core/context.hpp"
#include "core/error.hpp"

namespace kiln::test {

inline int g_failures = 0;
inline std::string g_case;  // the case running, named in failure messages

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      ++kiln::test::g_failures;                                                                  \
      std::fprintf(stderr, "FAIL [%s] %s:%d: %s\n", kiln::test::g_case.c_str(), __FILE__, __LINE__, #cond); \
    }                                                                                            \
  } while (0)

// A check whose message says what the expression alone cannot (the values,
// the layout, the step).
inline void expect(bool ok, const std::string &what) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "FAIL [%s] %s\n", g_case.c_str(), what.c_str());
}

// The end of a suite's main: "<suite>: all checks passed" and 0, or the
// count of failed checks and 1.
inline int finish(const char *suite) {
  if (g_failures) {
    std::fprintf(stderr, "%s: %d check(s) failed\n", suite, g_failures);
    return 1;
  }
  std::printf("%s: all checks passed\n", suite);
  return 0;
}

// KILN_OK, or the status of the kiln::Error fn throws (its message in
// *message when asked).
inline kiln_status status_of(const std::function<void()> &fn, std::string *message = nullptr) {
  try {
    fn();
  } catch (const Error &e) {
    if (message) *message = e.what();
    return e.status();
  }
  return KILN_OK;
}

// The whole program: cpu(ctx) and cuda(ctx) as KILN_TEST_DEVICE selects, on a
// context with `threads` CPU threads; an unexpected exception or a failed
// CHECK exits 1, "<suite>: all checks passed" exits 0.
inline int run_suite(const char *suite, int64_t threads, const std::function<void(Context &)> &cpu,
                     const std::function<void(Context &)> &cuda) {
  const char *mode = std::getenv("KILN_TEST_DEVICE");
  const bool cuda_only = mode && std::strcmp(mode, "cuda") == 0;
  const bool cpu_only = mode && std::strcmp(mode, "cpu") == 0;
  try {
    ContextOptions options;
    options.threads = threads;
    options.log_level = KILN_LOG_ERROR;
    std::shared_ptr<Context> ctx = Context::create(options, backend_registry());
    if (!cuda_only) cpu(*ctx);
    if (!cpu_only && ctx->cuda_available()) {
      cuda(*ctx);
    } else if (cuda_only) {
      std::fprintf(stderr, "skipped: no usable CUDA device (%s)\n", ctx->cuda_unavailable_reason().c_str());
      return 77;
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "FAIL [%s] unexpected exception: %s\n", g_case.c_str(), e.what());
    return 1;
  }
  return finish(suite);
}

}  // namespace kiln::test
