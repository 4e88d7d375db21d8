/* The time a cache line takes to go from one core to another and back,
 * printed as one JSON object on stdout: how costly it is, right now, for two
 * threads to share data. bench/run.py records it next to each two-thread
 * training run, because on this project's 2-core VM that cost moves by a
 * factor of 4 within an hour (84 to 410 ns, 2026-11-27), and a
 * 784-1024-1024-10 step on two threads, whose threads read each other's
 * activations and weights, moves with it (86% of the FMA peak at 84 ns, 78%
 * in a run that saw 390), while one thread's step hardly does.
 *
 *   core_round_trip [--trips N]
 *
 * Two threads, pinned to the first two CPUs of the process's affinity set,
 * take turns writing one cache line: each waits for the other's value, then
 * writes its own. The figure is the median of 5 rounds of N round trips
 * (default 200000), in nanoseconds per round trip. With fewer than two CPUs
 * it prints {"error": ...} and exits 0, as there is nothing to measure. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The line the threads pass back and forth, alone on its 64 bytes. */
static _Alignas(64) atomic_long turn;
static long trips;

/* The set of CPU `cpu` alone. */
static cpu_set_t only(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return set;
}

/* The second thread: answers each odd value with the next even one. */
static void *answer(void *arg) {
  (void)arg;
  for (long i = 0; i < trips; ++i) {
    while (atomic_load_explicit(&turn, memory_order_acquire) != 2 * i + 1) {
    }
    atomic_store_explicit(&turn, 2 * i + 2, memory_order_release);
  }
  return NULL;
}

/* Nanoseconds per round trip over one round of `trips`, with the second
 * thread started on second_cpu (pinned at creation: a thread that could not
 * be pinned is never started, rather than left unanswering); -1 when it
 * cannot be. */
static double round_ns(int second_cpu) {
  pthread_t t;
  pthread_attr_t attr;
  const cpu_set_t set = only(second_cpu);
  if (pthread_attr_init(&attr) != 0) return -1;
  int failed = pthread_attr_setaffinity_np(&attr, sizeof set, &set) != 0;
  atomic_store(&turn, 0);
  failed = failed || pthread_create(&t, &attr, answer, NULL) != 0;
  pthread_attr_destroy(&attr);
  if (failed) return -1;
  double t0 = now();
  for (long i = 0; i < trips; ++i) {
    atomic_store_explicit(&turn, 2 * i + 1, memory_order_release);
    while (atomic_load_explicit(&turn, memory_order_acquire) != 2 * i + 2) {
    }
  }
  double seconds = now() - t0;
  pthread_join(t, NULL);
  return seconds / (double)trips * 1e9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  trips = 200000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--trips")) trips = atol(argv[i + 1]);
    else { fprintf(stderr, "core_round_trip: unknown flag %s\n", argv[i]); return 2; }
  }
  if (trips < 1) { fprintf(stderr, "core_round_trip: bad --trips\n"); return 2; }
  cpu_set_t set;
  int cpus[2], found = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE && found < 2; ++c)
      if (CPU_ISSET(c, &set)) cpus[found++] = c;
  if (found < 2) {
    printf("{\"error\": \"needs two CPUs, has %d\"}\n", found);
    return 0;
  }
  const cpu_set_t first = only(cpus[0]);
  if (pthread_setaffinity_np(pthread_self(), sizeof first, &first) != 0) {
    printf("{\"error\": \"cannot pin a thread to CPU %d\"}\n", cpus[0]);
    return 0;
  }
  double ns[5];
  for (int r = 0; r < 5; ++r) {
    ns[r] = round_ns(cpus[1]);
    if (ns[r] < 0) {
      printf("{\"error\": \"cannot start a thread on CPU %d\"}\n", cpus[1]);
      return 0;
    }
  }
  qsort(ns, 5, sizeof ns[0], by_value);
  printf("{\"cpus\": [%d, %d], \"trips\": %ld, \"round_trip_ns\": %.1f}\n", cpus[0], cpus[1], trips, ns[2]);
  return 0;
}
