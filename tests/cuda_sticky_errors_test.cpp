// backend/cuda/check.hpp's list of sticky CUDA errors (after which the
// device's context is lost) against the documentation of the toolkit kiln is
// built with: every enumerator of cudaError whose comment in driver_types.h
// says it leaves "the process in an inconsistent state" or that the process
// "must be terminated and relaunched" must be in the list, so a newer
// toolkit's new fatal error cannot slip past as an ordinary BACKEND error.
// And errors a process recovers from (a failed allocation, a capture that
// was refused) must not be in it. Built with the CUDA plugin only; runs
// without a GPU.
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "backend/cuda/check.hpp"

int main() {
  std::ifstream in(KILN_CUDA_DRIVER_TYPES_H);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", KILN_CUDA_DRIVER_TYPES_H);
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  const std::string header = text.str();
  // "/** ...comment... */ cudaErrorName = 123," within enum cudaError.
  const size_t begin = header.find("enum __device_builtin__ cudaError");
  const size_t end = header.find("};", begin);
  if (begin == std::string::npos || end == std::string::npos) {
    std::fprintf(stderr, "enum cudaError not found in %s\n", KILN_CUDA_DRIVER_TYPES_H);
    return 1;
  }
  const std::string body = header.substr(begin, end - begin);
  const std::regex entry(R"(/\*\*((?:[^*]|\*(?!/))*)\*/\s*(cudaError\w+)\s*=\s*(\d+))");
  int documented = 0, failures = 0, entries = 0;
  for (std::sregex_iterator it(body.begin(), body.end(), entry), stop; it != stop; ++it) {
    ++entries;
    std::string comment = (*it)[1];
    for (char &c : comment)
      if (c == '\n' || c == '*') c = ' ';
    comment = std::regex_replace(comment, std::regex(R"(\s+)"), " ");
    const bool fatal = comment.find("inconsistent state") != std::string::npos ||
                       comment.find("terminated and relaunched") != std::string::npos;
    if (!fatal) continue;
    ++documented;
    const int code = std::stoi((*it)[3]);
    if (!kiln::cuda::is_sticky(static_cast<cudaError_t>(code))) {
      std::fprintf(stderr, "FAIL: %s (%d) is documented as fatal but is_sticky says no\n", (*it)[2].str().c_str(), code);
      ++failures;
    }
  }
  for (cudaError_t recoverable : {cudaErrorMemoryAllocation, cudaErrorInvalidValue, cudaErrorNotReady,
                                  cudaErrorStreamCaptureUnsupported, cudaErrorStreamCaptureInvalidated,
                                  cudaErrorInsufficientDriver, cudaErrorNoDevice}) {
    if (kiln::cuda::is_sticky(recoverable)) {
      std::fprintf(stderr, "FAIL: %d is recoverable but is_sticky says it is fatal\n", int(recoverable));
      ++failures;
    }
  }
  if (entries < 50 || documented < 10) {
    std::fprintf(stderr, "FAIL: only %d enumerators, %d documented as fatal: the header's format changed\n", entries,
                 documented);
    ++failures;
  }
  if (failures) return 1;
  std::printf("cuda_sticky_errors_test: all %d errors %s documents as fatal are sticky (of %d)\n", documented,
              KILN_CUDA_DRIVER_TYPES_H, entries);
  return 0;
}
