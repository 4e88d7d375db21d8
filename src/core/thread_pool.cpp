// The thread pool's job protocol; see thread_pool.hpp for what it promises.
#include "core/thread_pool.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <system_error>

#include "core/error.hpp"

namespace kiln {

namespace {

// How long an idle worker keeps polling for the next job before it sleeps.
// A training step queues kernels microseconds apart; this covers the gaps
// between them and between steps, and is short enough to be invisible when
// the pool really goes idle.
constexpr auto kSpinTime = std::chrono::microseconds(200);

constexpr uint64_t kChunkMask = 0xffffffffull;

// Chunks per thread in a job. More than one, so that when a worker is slow
// to start (descheduled on a busy machine) the others take its share
// instead of waiting for it; few, so each chunk stays big.
constexpr int64_t kChunksPerThread = 4;

// The floating-point control state that workers copy from the caller.
inline uint32_t fp_control() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_ia32_stmxcsr();
#else
  return 0;
#endif
}

inline void set_fp_control(uint32_t state) {
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_ia32_stmxcsr() != state) __builtin_ia32_ldmxcsr(state);
#else
  (void)state;
#endif
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

int64_t available_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? int64_t(hw) : 1;
}

// Set by ThreadPool::SerialScope: this thread's jobs run on it alone.
thread_local bool t_serial = false;

}  // namespace

ThreadPool::SerialScope::SerialScope() : outer_(t_serial) { t_serial = true; }
ThreadPool::SerialScope::~SerialScope() { t_serial = outer_; }

ThreadPool::ThreadPool(int64_t threads) {
  // Thousands of threads is never a sensible request, and each costs a stack.
  constexpr int64_t kMaxThreads = 1024;
  check(threads >= 0 && threads <= kMaxThreads, KILN_ERROR_INVALID_ARGUMENT,
        "thread count " + std::to_string(threads) + " is outside [0, " + std::to_string(kMaxThreads) + "]");
  size_ = threads == 0 ? available_cpus() : threads;
  workers_.reserve(size_t(size_ - 1));
  try {
    for (int64_t i = 1; i < size_; ++i) workers_.emplace_back([this] { worker_main(); });
  } catch (const std::system_error &e) {
    int64_t started = int64_t(workers_.size());
    shutdown();
    fail(KILN_ERROR_OUT_OF_MEMORY, "could not start CPU worker thread " + std::to_string(started + 1) + " of " +
                                       std::to_string(size_ - 1) + ": " + e.what() +
                                       " (out of memory for its stack, or at the process's thread limit)");
  }
  while (started_.load(std::memory_order_acquire) < size_ - 1) std::this_thread::yield();
}

ThreadPool::~ThreadPool() { shutdown(); }

void ThreadPool::shutdown() {
  {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto &worker : workers_) worker.join();
  workers_.clear();
}

int64_t ThreadPool::chunk_count(int64_t n, int64_t grain) const {
  if (n <= 0) return 1;
  grain = std::max<int64_t>(grain, 1);
  int64_t wanted = n / grain + (n % grain != 0 ? 1 : 0);
  return std::max<int64_t>(1, std::min(wanted, size_ == 1 ? 1 : size_ * kChunksPerThread));
}

void ThreadPool::run(int64_t n, int64_t chunks, Trampoline fn, void *ctx) {
  if (n <= 0) return;
  std::unique_lock<std::mutex> busy(busy_, std::defer_lock);
  if (chunks <= 1 || workers_.empty() || t_serial || !busy.try_lock()) {
    // Serial, with the same split, so chunked reductions give the same bits.
    for (int64_t c = 0; c < chunks; ++c) {
      int64_t begin, end;
      chunk_range(n, chunks, c, &begin, &end);
      fn(ctx, c, begin, end);
    }
    return;
  }

  // Close the previous job before overwriting its fields: its chunks are
  // all claimed and done, but a late worker may still be between reading
  // the job fields and claiming (work_on). Were its state left at
  // (generation, chunk count), such a worker that read this job's larger
  // chunk count (or its fn and ctx) could claim a chunk of the old
  // generation and run this job's chunk before it is published: twice, and
  // with chunks_done_ counted once too often, so that this call could
  // return before the chunk's real run ends. With the chunk index at
  // kChunkMask, no claim of the old generation can succeed. The fields'
  // release stores pair with work_on's acquire loads: a worker that read
  // any field written below then sees the closed state, or a newer one.
  // (Release and acquire, not fences, which ThreadSanitizer does not model;
  // on x86 both are plain moves.)
  uint64_t previous = state_.load(std::memory_order_relaxed) >> 32;
  state_.store((previous << 32) | kChunkMask, std::memory_order_relaxed);
  job_fn_.store(fn, std::memory_order_release);
  job_ctx_.store(ctx, std::memory_order_release);
  job_n_.store(n, std::memory_order_release);
  job_chunks_.store(chunks, std::memory_order_release);
  job_fp_control_.store(fp_control(), std::memory_order_release);
  chunks_done_.store(0, std::memory_order_relaxed);
  job_error_ = nullptr;
  uint64_t generation = (previous + 1) & kChunkMask;
  // seq_cst store then seq_cst load of sleepers_: either a worker going to
  // sleep sees the new generation, or we see it counted and wake it.
  state_.store(generation << 32);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    wake_.notify_all();
  }

  work_on(generation);
  for (int spins = 0; chunks_done_.load(std::memory_order_acquire) < chunks; ++spins) {
    if (spins < 4096) {
      cpu_relax();
    } else {
      std::this_thread::yield();  // a worker was descheduled: let it run
    }
  }
  if (job_error_) {
    std::exception_ptr error = job_error_;
    job_error_ = nullptr;
    std::rethrow_exception(error);
  }
}

void ThreadPool::work_on(uint64_t generation) {
  // Read before claiming: a successful claim below proves these belong to
  // `generation`, since its caller cannot start another job before our
  // claimed chunk is done, and closes `generation` (no chunk left to claim)
  // before it writes the next job's fields. Acquire loads, pairing with
  // run()'s release stores: had any of them read the next job's value, the
  // state loaded below is the closed one or newer, and we claim nothing.
  Trampoline fn = job_fn_.load(std::memory_order_acquire);
  void *ctx = job_ctx_.load(std::memory_order_acquire);
  int64_t n = job_n_.load(std::memory_order_acquire);
  int64_t chunks = job_chunks_.load(std::memory_order_acquire);
  const uint32_t fp_state = job_fp_control_.load(std::memory_order_acquire);
  uint64_t state = state_.load(std::memory_order_acquire);
  for (;;) {
    if ((state >> 32) != generation) return;
    int64_t chunk = int64_t(state & kChunkMask);
    if (chunk >= chunks) return;
    if (!state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      continue;
    }
    int64_t begin, end;
    chunk_range(n, chunks, chunk, &begin, &end);
    set_fp_control(fp_state);
    try {
      fn(ctx, chunk, begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!job_error_) job_error_ = std::current_exception();
    }
    chunks_done_.fetch_add(1, std::memory_order_acq_rel);
    state = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_main() {
  uint64_t seen = state_.load(std::memory_order_acquire) >> 32;
  started_.fetch_add(1, std::memory_order_release);  // after `seen`: the first job is one this worker joins
  for (;;) {
    uint64_t generation = seen;
    auto spin_start = std::chrono::steady_clock::now();
    for (int spins = 1;; ++spins) {
      generation = state_.load(std::memory_order_acquire) >> 32;
      if (generation != seen || stop_.load(std::memory_order_relaxed)) break;
      cpu_relax();
      if (spins % 256 == 0 && std::chrono::steady_clock::now() - spin_start > kSpinTime) {
        std::unique_lock<std::mutex> lock(sleep_mutex_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return stop_.load() || (state_.load() >> 32) != seen; });
        sleepers_.fetch_sub(1);
        spin_start = std::chrono::steady_clock::now();
      }
    }
    if (stop_.load()) return;
    seen = generation;
    work_on(generation);
  }
}

}  // namespace kiln
