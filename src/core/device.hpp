// Device values: {kind, index}; "cpu" has index -1 as PyTorch's get_device().
#pragma once

#include <cstdint>
#include <string>

#include "kiln/kiln.h"

namespace kiln {

struct Device {
  kiln_device_kind kind = KILN_DEVICE_CPU;
  int64_t index = -1;

  static Device cpu() { return {KILN_DEVICE_CPU, -1}; }
  static Device cuda(int64_t i) { return {KILN_DEVICE_CUDA, i}; }
  bool is_cpu() const { return kind == KILN_DEVICE_CPU; }
  bool operator==(const Device &o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device &o) const { return !(*this == o); }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  kiln_device to_c() const { return {kind, index}; }
};

}  // namespace kiln
