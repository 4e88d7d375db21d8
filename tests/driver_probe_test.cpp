// kiln::describe_driver_failure tells a missing driver library from one that
// loads and fails in cuInit (the CUDA runtime reports both as "CUDA driver
// version is insufficient for CUDA runtime version"). Fakes: a path that does
// not exist, a library without cuInit (libm), and fake_libcuda.c, whose
// cuInit returns CUDA_ERROR_NO_DEVICE.
#include <cstdio>
#include <string>

#include "backend/driver_probe.hpp"

namespace {

int failures = 0;

void expect_contains(const std::string &text, const std::string &needle) {
  if (text.find(needle) != std::string::npos) return;
  std::fprintf(stderr, "FAIL: \"%s\" does not contain \"%s\"\n", text.c_str(), needle.c_str());
  ++failures;
}

}  // namespace

int main() {
  const std::string missing = kiln::describe_driver_failure("/nonexistent/libcuda.so.1");
  expect_contains(missing, "/nonexistent/libcuda.so.1 not found (");
  expect_contains(missing, "No such file or directory");

  const std::string not_a_driver = kiln::describe_driver_failure("libm.so.6");
  expect_contains(not_a_driver, "was found but has no cuInit");

  const std::string failing = kiln::describe_driver_failure(KILN_FAKE_LIBCUDA);
  expect_contains(failing, std::string(KILN_FAKE_LIBCUDA) + " was found but cuInit failed with CUDA_ERROR_NO_DEVICE (100)");

  if (failures == 0) std::printf("driver_probe_test: 3 cases passed\n  %s\n  %s\n  %s\n", missing.c_str(),
                                 not_a_driver.c_str(), failing.c_str());
  return failures == 0 ? 0 : 1;
}
