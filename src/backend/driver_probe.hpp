// Tells apart the two ways the CUDA driver can be missing, which the CUDA
// runtime reports as one error ("CUDA driver version is insufficient for
// CUDA runtime version"): the driver library was not found by the dynamic
// loader, or it was found and cuInit failed (and with which CUresult).
// Plain dlopen/dlsym, no CUDA headers: it lives in kiln_internal so the CPU
// build tests it against fake driver libraries.
#pragma once

#include <string>

namespace kiln {

// One line for "no CUDA driver: <this>", e.g. "libcuda.so.1 not found
// (libcuda.so.1: cannot open shared object file: No such file or directory)"
// or "/usr/lib/x86_64-linux-gnu/libcuda.so.1 was found but cuInit failed
// with CUDA_ERROR_NO_DEVICE (100)". A library that loads is left loaded: the
// CUDA runtime may hold it too, and a driver is not made to be unloaded.
std::string describe_driver_failure(const char *library);

}  // namespace kiln
