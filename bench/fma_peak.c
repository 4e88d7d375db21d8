/* The machine's measured FMA peak, printed as one JSON object on stdout: the
 * ceiling that bench/run.py divides each CPU workload's model FLOP/s by.
 *
 *   fma_peak [--threads N] [--seconds S]
 *
 * Every thread (default: one per online CPU) runs independent chains of
 * packed single-precision FMAs (acc = acc * m + c), enough chains to cover
 * the FMA latency on two FMA pipes, with the widest instruction set the CPU
 * has, chosen at run time: AVX-512 (24 chains of 16 floats) where
 * __builtin_cpu_supports("avx512f"), else AVX2+FMA (12 chains of 8), else
 * scalar C (which the compiler may vectorise; reported as "scalar"). One FMA
 * counts 2 FLOPs per lane. The best of several timed rounds is reported, for
 * all threads together (the sum of each thread's own rate) and for one thread
 * alone. */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile float sink;

/* Each kernel runs iters rounds of its chains and returns the FLOPs done. */
__attribute__((target("avx512f"))) static double kernel_avx512(long iters) {
  __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
  __m512 a[24];
  for (int i = 0; i < 24; ++i) a[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  }
  __m512 s = a[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, a[i]);
  sink = _mm512_reduce_add_ps(s);
  return (double)iters * 24 * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double kernel_avx2(long iters) {
  __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1.0f + i * 1e-3f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  }
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  sink = out[0] + out[7];
  return (double)iters * 12 * 8 * 2;
}

static double kernel_scalar(long iters) {
  float a[32];
  for (int i = 0; i < 32; ++i) a[i] = 1.0f + i * 1e-3f;
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 32; ++i) a[i] = a[i] * 0.999999f + 1e-6f;
  float s = 0;
  for (int i = 0; i < 32; ++i) s += a[i];
  sink = s;
  return (double)iters * 32 * 2;
}

static double (*kernel)(long);
static const char *isa;

struct job {
  long iters;
  pthread_barrier_t *start;
  double gflops; /* this thread's own rate, over its own run */
};

static void *worker(void *arg) {
  struct job *j = arg;
  pthread_barrier_wait(j->start);
  double t0 = now();
  double flops = kernel(j->iters);
  j->gflops = flops / (now() - t0) * 1e-9;
  return NULL;
}

/* GFLOP/s of n threads running iters rounds each at once: the sum of their
 * rates, each timed by the thread itself. Timed by the caller from the
 * barrier instead, the caller (a third thread on two cores) often ran only
 * after the workers had started: its clock began up to 4 ms late in rounds
 * of 200 ms, and two threads came out 1-2% above twice one. */
static double run(int n, long iters) {
  pthread_t *t = calloc((size_t)n, sizeof *t);
  struct job *jobs = calloc((size_t)n, sizeof *jobs);
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)n + 1);
  for (int i = 0; i < n; ++i) {
    jobs[i] = (struct job){iters, &start, 0};
    pthread_create(&t[i], NULL, worker, &jobs[i]);
  }
  pthread_barrier_wait(&start);
  double gflops = 0;
  for (int i = 0; i < n; ++i) {
    pthread_join(t[i], NULL);
    gflops += jobs[i].gflops;
  }
  pthread_barrier_destroy(&start);
  free(t);
  free(jobs);
  return gflops;
}

/* Best of rounds of about `seconds` each (iterations calibrated on one thread). */
static double best(int n, double seconds, long *iters_out) {
  long iters = 1 << 16;
  for (;;) {
    double t0 = now();
    kernel(iters);
    double dt = now() - t0;
    if (dt > 0.02) {
      iters = (long)(iters * seconds / dt) + 1;
      break;
    }
    iters *= 4;
  }
  double top = 0;
  for (int r = 0; r < 5; ++r) {
    double g = run(n, iters);
    if (g > top) top = g;
  }
  *iters_out = iters;
  return top;
}

int main(int argc, char **argv) {
  int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  double seconds = 0.2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[i + 1]);
    else { fprintf(stderr, "fma_peak: unknown flag %s\n", argv[i]); return 2; }
  }
  if (threads < 1 || seconds <= 0) { fprintf(stderr, "fma_peak: bad --threads or --seconds\n"); return 2; }
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) kernel = kernel_avx512, isa = "avx512";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) kernel = kernel_avx2, isa = "avx2-fma";
  else kernel = kernel_scalar, isa = "scalar";
  long iters;
  double one = best(1, seconds, &iters);
  double all = best(threads, seconds, &iters);
  printf("{\"isa\": \"%s\", \"precision\": \"fp32\", \"threads\": %d, \"gflops\": %.1f, "
         "\"gflops_one_thread\": %.1f, \"seconds_per_round\": %.2f}\n",
         isa, threads, all, one, seconds);
  return 0;
}
