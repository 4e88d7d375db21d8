// The CUDA driver, asked directly through libcuda.so.1 (plain dlopen/dlsym,
// no CUDA headers), for two things:
//  - cuda_driver_unavailable: whether the driver loads, starts (cuInit) and
//    sees a device, asked by the registry BEFORE it loads the CUDA plugin,
//    so that a machine without a GPU never maps cuBLAS, cuDNN and the CUDA
//    runtime (hundreds of MB and most of a second) only to learn that;
//  - describe_driver_failure: which of the two ways the driver can be missing
//    the CUDA runtime meant, when it reports both as one error ("CUDA driver
//    version is insufficient for CUDA runtime version"): the library was not
//    found, or it was found and cuInit failed (and with which CUresult).
// It lives in kiln_internal, so the CPU build tests it against fake driver
// libraries (tests/fake_libcuda.c).
#pragma once

#include <string>

namespace kiln {

// One line for "no CUDA driver: <this>", e.g. "libcuda.so.1 not found
// (libcuda.so.1: cannot open shared object file: No such file or directory)"
// or "/usr/lib/x86_64-linux-gnu/libcuda.so.1 was found but cuInit failed
// with CUDA_ERROR_NO_DEVICE (100)". A library that loads is left loaded: the
// CUDA runtime may hold it too, and a driver is not made to be unloaded.
std::string describe_driver_failure(const char *library);

// "" when `library` (the driver, "libcuda.so.1") loads, cuInit(0) succeeds
// and cuDeviceGetCount counts at least one device; otherwise the reason CUDA
// is unavailable, as a context reports it:
//   "no CUDA driver: libcuda.so.1 not found (<the loader's message>)"
//   "no CUDA driver: <path> was found but has no cuInit (...)"
//   "no CUDA device found (CUDA_VISIBLE_DEVICES=\"\"): <path> was found but
//    cuInit failed with CUDA_ERROR_NO_DEVICE (100)"
//   "no CUDA driver: <path> was found but cuInit failed with <name> (<n>)"
//   "no CUDA device found (...): cuDeviceGetCount counts 0"
// (the CUDA_VISIBLE_DEVICES part only when the variable is set). Costs a
// dlopen of the driver and its cuInit, nothing of the CUDA runtime.
std::string cuda_driver_unavailable(const char *library);

}  // namespace kiln
