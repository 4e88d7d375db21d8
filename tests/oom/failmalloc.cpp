/*
 * An allocator that fails on request, for the out-of-memory injection test
 * (test_oom.c), loaded with LD_PRELOAD so that every allocation of the
 * process goes through it: malloc and its relatives (libkiln's, glibc's own
 * in fopen or strdup) and operator new. It forwards to the next malloc in the
 * lookup order (glibc's, or AddressSanitizer's in the sanitizer lane), and
 * its operator new calls its malloc: ASan's own operator new would bypass
 * malloc, and the injection with it.
 *
 * kiln_oom_arm(n) makes the n-th allocation from then on fail (NULL, as
 * malloc does when memory runs out: operator new turns it into
 * std::bad_alloc); later ones succeed again, so a caller that frees and
 * reports can clean up. kiln_oom_disarm() says whether the failure happened.
 * kiln_oom_live() counts the blocks allocated and not yet freed, so the test
 * can see a leak without a leak checker.
 *
 * Allocations on every thread count, in the order they happen: the test runs
 * kiln with one thread so that the order is the same from run to run.
 */
#include <dlfcn.h>
#include <execinfo.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

static void *(*next_malloc)(size_t);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);
static void (*next_free)(void *);
static int (*next_posix_memalign)(void **, size_t, size_t);
static void *(*next_aligned_alloc)(size_t, size_t);
static void *(*next_memalign)(size_t, size_t);

/* dlsym allocates (its error buffer) while the pointers above are being
 * looked up: those few early blocks come from here and are never freed. */
alignas(64) static char bootstrap[1 << 16];
static size_t bootstrap_used;
static int resolving;

static long armed_at;   /* the allocation to fail, counted from kiln_oom_arm; 0 = disarmed */
static long seen;       /* allocations since kiln_oom_arm */
static int injected;    /* whether armed_at was reached */
static long live;       /* blocks allocated and not freed */

static void *bootstrap_alloc(size_t size) {
  size = (size + 63) & ~(size_t)63;
  if (bootstrap_used + size > sizeof bootstrap) return NULL;
  void *p = bootstrap + bootstrap_used;
  bootstrap_used += size;
  return p;
}

static int from_bootstrap(const void *p) {
  return (const char *)p >= bootstrap && (const char *)p < bootstrap + sizeof bootstrap;
}

static void resolve(void) {
  if (next_malloc || resolving) return;
  resolving = 1;
  next_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
  next_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
  next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
  next_posix_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
  next_aligned_alloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
  next_memalign = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
  next_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
  resolving = 0;
}

/* Counts one allocation; 1 when it is the one to fail. With KILN_OOM_TRACE
 * set, the stack of the failed allocation goes to stderr: the way to find
 * which allocation a failing probe of test_oom names. */
static int should_fail(void) {
  if (__atomic_load_n(&armed_at, __ATOMIC_RELAXED) == 0) return 0;
  const long n = __atomic_add_fetch(&seen, 1, __ATOMIC_RELAXED);
  if (n != __atomic_load_n(&armed_at, __ATOMIC_RELAXED)) return 0;
  __atomic_store_n(&injected, 1, __ATOMIC_RELAXED);
  if (getenv("KILN_OOM_TRACE")) {
    const long at = __atomic_exchange_n(&armed_at, 0, __ATOMIC_RELAXED);  /* backtrace may allocate */
    void *frames[64];
    const int depth = backtrace(frames, 64);
    fprintf(stderr, "failmalloc: failing allocation %ld here:\n", n);
    backtrace_symbols_fd(frames, depth, 2);
    __atomic_store_n(&armed_at, at, __ATOMIC_RELAXED);
  }
  return 1;
}

static void *counted(void *p) {
  if (p) __atomic_add_fetch(&live, 1, __ATOMIC_RELAXED);
  return p;
}

extern "C" {

void *malloc(size_t size) {
  resolve();
  if (!next_malloc) return bootstrap_alloc(size);
  if (should_fail()) {
    errno = ENOMEM;
    return NULL;
  }
  return counted(next_malloc(size));
}

void *calloc(size_t n, size_t size) {
  resolve();
  if (!next_calloc) {
    if (size && n > SIZE_MAX / size) return NULL;
    return bootstrap_alloc(n * size); /* static storage: already zero */
  }
  if (should_fail()) {
    errno = ENOMEM;
    return NULL;
  }
  return counted(next_calloc(n, size));
}

void free(void *p) {
  if (!p || from_bootstrap(p)) return;
  resolve();
  __atomic_sub_fetch(&live, 1, __ATOMIC_RELAXED);
  next_free(p);
}

void *realloc(void *p, size_t size) {
  resolve();
  if (p && from_bootstrap(p)) {
    /* Moves an early block out of the bootstrap area (its size is unknown:
     * copy as much as can be there). */
    const size_t room = (size_t)(bootstrap + sizeof bootstrap - (char *)p);
    void *q = malloc(size);
    if (q) memcpy(q, p, size < room ? size : room);
    return q;
  }
  if (!next_realloc) return bootstrap_alloc(size);
  if (!p) return malloc(size);
  if (size == 0) { /* glibc frees p and returns NULL */
    free(p);
    return NULL;
  }
  if (should_fail()) {
    errno = ENOMEM;
    return NULL; /* p stays valid, as when realloc runs out of memory */
  }
  return next_realloc(p, size);
}

/* glibc's reallocarray calls its realloc internally, past this one. */
void *reallocarray(void *p, size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(p, n * size);
}

int posix_memalign(void **out, size_t alignment, size_t size) {
  resolve();
  if (should_fail()) return ENOMEM;
  const int rc = next_posix_memalign(out, alignment, size);
  if (rc == 0) counted(*out);
  return rc;
}

void *aligned_alloc(size_t alignment, size_t size) {
  resolve();
  if (should_fail()) {
    errno = ENOMEM;
    return NULL;
  }
  return counted(next_aligned_alloc(alignment, size));
}

void *memalign(size_t alignment, size_t size) {
  resolve();
  if (should_fail()) {
    errno = ENOMEM;
    return NULL;
  }
  return counted(next_memalign(alignment, size));
}

/* ---- control, found by the test with dlsym ------------------------------- */

void kiln_oom_arm(long n) {
  __atomic_store_n(&seen, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&injected, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&armed_at, n, __ATOMIC_RELAXED);
}

/* Stops failing; returns 1 when the armed allocation was failed, and sets
 * *allocations to the number seen since kiln_oom_arm. */
int kiln_oom_disarm(long *allocations) {
  __atomic_store_n(&armed_at, 0, __ATOMIC_RELAXED);
  if (allocations) *allocations = __atomic_load_n(&seen, __ATOMIC_RELAXED);
  return __atomic_load_n(&injected, __ATOMIC_RELAXED);
}

long kiln_oom_live(void) { return __atomic_load_n(&live, __ATOMIC_RELAXED); }

}  // extern "C"

/* ---- operator new and delete, over the malloc above ---------------------- */

namespace {

void *new_or_throw(std::size_t size) {
  void *p = malloc(size ? size : 1);
  if (!p) throw std::bad_alloc();
  return p;
}

void *aligned_new_or_throw(std::size_t size, std::align_val_t alignment) {
  void *p = nullptr;
  std::size_t a = static_cast<std::size_t>(alignment);
  if (a < sizeof(void *)) a = sizeof(void *);
  if (posix_memalign(&p, a, size ? size : 1) != 0) throw std::bad_alloc();
  return p;
}

}  // namespace

void *operator new(std::size_t n) { return new_or_throw(n); }
void *operator new[](std::size_t n) { return new_or_throw(n); }
void *operator new(std::size_t n, const std::nothrow_t &) noexcept { return malloc(n ? n : 1); }
void *operator new[](std::size_t n, const std::nothrow_t &) noexcept { return malloc(n ? n : 1); }
void *operator new(std::size_t n, std::align_val_t a) { return aligned_new_or_throw(n, a); }
void *operator new[](std::size_t n, std::align_val_t a) { return aligned_new_or_throw(n, a); }
void *operator new(std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {
  try {
    return aligned_new_or_throw(n, a);
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
}
void *operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t &t) noexcept {
  return operator new(n, a, t);
}
void operator delete(void *p) noexcept { free(p); }
void operator delete[](void *p) noexcept { free(p); }
void operator delete(void *p, std::size_t) noexcept { free(p); }
void operator delete[](void *p, std::size_t) noexcept { free(p); }
void operator delete(void *p, const std::nothrow_t &) noexcept { free(p); }
void operator delete[](void *p, const std::nothrow_t &) noexcept { free(p); }
void operator delete(void *p, std::align_val_t) noexcept { free(p); }
void operator delete[](void *p, std::align_val_t) noexcept { free(p); }
void operator delete(void *p, std::size_t, std::align_val_t) noexcept { free(p); }
void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { free(p); }
void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { free(p); }
void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { free(p); }
