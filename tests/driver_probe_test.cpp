// The driver probe (backend/driver_probe.hpp) against fake drivers: a path
// that does not exist, a library without cuInit (libm), and fake_libcuda.c,
// whose cuInit returns CUDA_ERROR_NO_DEVICE, or succeeds with
// KILN_FAKE_CUDA_DEVICES devices when that variable is set.
//  - describe_driver_failure tells a missing driver library from one that
//    loads and fails in cuInit (the CUDA runtime reports both as "CUDA driver
//    version is insufficient for CUDA runtime version");
//  - cuda_driver_unavailable, which the registry asks before it loads the
//    plugin, gives the reason a context reports, or "" when there is a device.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/driver_probe.hpp"

namespace {

int failures = 0;

void expect_contains(const std::string &text, const std::string &needle) {
  if (text.find(needle) != std::string::npos) return;
  std::fprintf(stderr, "FAIL: \"%s\" does not contain \"%s\"\n", text.c_str(), needle.c_str());
  ++failures;
}

void expect_equal(const std::string &text, const std::string &want) {
  if (text == want) return;
  std::fprintf(stderr, "FAIL: \"%s\" is not \"%s\"\n", text.c_str(), want.c_str());
  ++failures;
}

}  // namespace

int main() {
  unsetenv("KILN_FAKE_CUDA_DEVICES");
  unsetenv("CUDA_VISIBLE_DEVICES");
  const std::string fake = KILN_FAKE_LIBCUDA;

  const std::string missing = kiln::describe_driver_failure("/nonexistent/libcuda.so.1");
  expect_contains(missing, "/nonexistent/libcuda.so.1 not found (");
  expect_contains(missing, "No such file or directory");
  const std::string not_a_driver = kiln::describe_driver_failure("libm.so.6");
  expect_contains(not_a_driver, "was found but has no cuInit");
  const std::string failing = kiln::describe_driver_failure(KILN_FAKE_LIBCUDA);
  expect_equal(failing, fake + " was found but cuInit failed with CUDA_ERROR_NO_DEVICE (100)");

  // What the registry reports without loading the plugin.
  const std::string no_driver = kiln::cuda_driver_unavailable("/nonexistent/libcuda.so.1");
  expect_contains(no_driver, "no CUDA driver: /nonexistent/libcuda.so.1 not found (");
  expect_contains(kiln::cuda_driver_unavailable("libm.so.6"), "no CUDA driver: ");
  expect_contains(kiln::cuda_driver_unavailable("libm.so.6"), "was found but has no cuInit");
  expect_equal(kiln::cuda_driver_unavailable(KILN_FAKE_LIBCUDA),
               "no CUDA device found: " + fake + " was found but cuInit failed with CUDA_ERROR_NO_DEVICE (100)");
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  expect_equal(kiln::cuda_driver_unavailable(KILN_FAKE_LIBCUDA),
               "no CUDA device found (CUDA_VISIBLE_DEVICES=\"\"): " + fake +
                   " was found but cuInit failed with CUDA_ERROR_NO_DEVICE (100)");
  unsetenv("CUDA_VISIBLE_DEVICES");
  setenv("KILN_FAKE_CUDA_DEVICES", "0", 1);
  expect_equal(kiln::cuda_driver_unavailable(KILN_FAKE_LIBCUDA),
               "no CUDA device found: cuDeviceGetCount of " + fake + " counts 0");
  setenv("KILN_FAKE_CUDA_DEVICES", "2", 1);
  expect_equal(kiln::cuda_driver_unavailable(KILN_FAKE_LIBCUDA), "");
  expect_equal(kiln::describe_driver_failure(KILN_FAKE_LIBCUDA),
               fake + " was found and cuInit succeeded, yet the CUDA runtime could not use it");

  if (failures == 0) std::printf("driver_probe_test: all cases passed\n  %s\n  %s\n  %s\n  %s\n", missing.c_str(),
                                 not_a_driver.c_str(), failing.c_str(), no_driver.c_str());
  return failures == 0 ? 0 : 1;
}
