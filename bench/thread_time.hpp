// What the C++ kernel benchmarks share: the calling thread's CPU time, which
// for one thread stays meaningful when the machine is shared and busy (wall
// time does not), next to wall time.
#pragma once

#include <time.h>

namespace kiln::bench {

// The calling thread's CPU time, in microseconds.
inline double thread_cpu_us() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e6 + double(t.tv_nsec) / 1e3;
}

// Wall time and the calling thread's CPU time of one call.
struct Timing {
  double wall_us, cpu_us;
};

}  // namespace kiln::bench
