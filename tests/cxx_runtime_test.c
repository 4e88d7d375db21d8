/* libkiln.so keeps its C++ runtime to itself, so C++ libraries loaded beside
 * it (NCCL, cuDNN, an application's own) bind to libstdc++.so.6 and not to
 * pieces of a runtime that a compiler linked statically into libkiln.
 *
 * The GPU image's g++ links libstdc++ statically. Before libkiln was linked
 * with --exclude-libs, it then exported __once_proxy, ahead of libstdc++.so.6,
 * and every std::call_once in NCCL and cuDNN jumped to address 0
 * (CMakeLists.txt, libkiln's link options).
 *
 *   cxx_runtime_test [LIBNCCL]
 *
 * Fails when libkiln.so defines a symbol of the C++ runtime that a library
 * loaded later would bind to, or when NCCL's first std::call_once (in
 * ncclGetUniqueId, which needs no GPU) crashes. Exit status 0 when both hold. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <kiln/kiln.h>

int main(int argc, char **argv) {
  Dl_info kiln_info;
  if (!dladdr((void *)kiln_version_string, &kiln_info) || !kiln_info.dli_fname) {
    fprintf(stderr, "FAIL: dladdr cannot name the library of kiln_version_string\n");
    return 1;
  }
  void *kiln = dlopen(kiln_info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  if (!kiln) {
    fprintf(stderr, "FAIL: %s is not loaded: %s\n", kiln_info.dli_fname, dlerror());
    return 1;
  }
  /* The extern "C" half of the runtime: its C++ half is mangled, which
   * libkiln's version script keeps local whatever the compiler does. */
  static const char *const runtime[] = {"__once_proxy",          "__cxa_throw",       "__cxa_begin_catch",
                                        "__cxa_guard_acquire",   "__cxa_get_globals", "__gxx_personality_v0",
                                        "_Unwind_RaiseException"};
  int failures = 0;
  for (size_t i = 0; i < sizeof runtime / sizeof runtime[0]; ++i) {
    void *symbol = dlsym(kiln, runtime[i]);
    Dl_info where;
    if (symbol && dladdr(symbol, &where) && where.dli_fname && strcmp(where.dli_fname, kiln_info.dli_fname) == 0) {
      fprintf(stderr, "FAIL: %s exports %s, which NCCL and cuDNN would bind to\n", kiln_info.dli_fname, runtime[i]);
      ++failures;
    }
  }
  if (argc > 1) {
    void *nccl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!nccl) {
      fprintf(stderr, "FAIL: cannot load NCCL: %s\n", dlerror());
      return 1;
    }
    int (*get_unique_id)(void *) = (int (*)(void *))dlsym(nccl, "ncclGetUniqueId");
    if (!get_unique_id) {
      fprintf(stderr, "FAIL: %s has no ncclGetUniqueId\n", argv[1]);
      return 1;
    }
    char id[128]; /* ncclUniqueId is 128 bytes */
    /* Its status depends on the machine's network interfaces; what is tested
     * is that its std::call_once returns at all. */
    int status = get_unique_id(id);
    printf("ncclGetUniqueId returned %d after its std::call_once\n", status);
  }
  if (failures) return 1;
  printf("PASS: %s keeps its C++ runtime to itself\n", kiln_info.dli_fname);
  return 0;
}
