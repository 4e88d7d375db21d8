// A persistent pool of worker threads for data-parallel loops.
//
// Workers spin for a short while after each job before they sleep on a
// condition variable, so the back-to-back kernels of a training step pay no
// wake-up cost, while an idle pool costs nothing. The calling thread takes
// part in every job, so a pool of size N has N - 1 workers.
//
// Concurrency: one job runs at a time. A caller that finds the pool busy
// (another thread's job, or a parallel_for nested inside a job) runs its
// loop serially on its own thread instead of waiting, so the pool never
// deadlocks and concurrent callers never block each other; so does a caller
// inside a SerialScope. Results do not depend on which of the two happens:
// the split into chunks is the same.
//
// Workers run each chunk with the submitting thread's floating-point
// control state (x86 MXCSR: rounding, flush-to-zero), so results do not
// depend on which thread ran a chunk.
//
// No allocation happens after construction.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace kiln {

// Chunk c of n items split into `chunks` balanced contiguous ranges (the
// first n % chunks one item longer), written so that n * c cannot overflow.
// The pool's split, and the equal-height tiles of kernels.
inline void chunk_range(int64_t n, int64_t chunks, int64_t c, int64_t *begin, int64_t *end) {
  int64_t base = n / chunks, extra = n % chunks;
  *begin = base * c + std::min(c, extra);
  *end = *begin + base + (c < extra ? 1 : 0);
}

class ThreadPool {
 public:
  // threads >= 1, or 0 for one per CPU available to the process.
  explicit ThreadPool(int64_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  // Threads that run a job, the caller included.
  int64_t size() const { return size_; }

  // While one lives, every job its constructing thread submits (to any
  // pool) runs on that thread alone, chunk after chunk in order, as a busy
  // pool's jobs do: the same split, so the same results. For a caller that
  // measured the workers to cost more than they save (short jobs on a busy
  // machine, or cores whose caches are far apart). Nests; other threads'
  // jobs are unaffected.
  class SerialScope {
   public:
    SerialScope();
    ~SerialScope();
    SerialScope(const SerialScope &) = delete;
    SerialScope &operator=(const SerialScope &) = delete;

   private:
    bool outer_;  // the thread's state before this scope
  };

  // How many chunks a loop over n items with at least `grain` items per
  // chunk is split into: 1 when size() is 1, else at most a few per thread
  // (threads claim chunks as they come free). Chunks are balanced
  // contiguous ranges in order (chunk c's items precede chunk c + 1's).
  int64_t chunk_count(int64_t n, int64_t grain) const;

  // Calls fn(begin, end) over disjoint ranges covering [0, n), on several
  // threads when n > grain. Returns when all calls returned; an exception
  // thrown by fn is rethrown here (the first one, once all chunks ended).
  template <class F>
  void parallel_for(int64_t n, int64_t grain, F &&fn) {
    parallel_chunks(n, grain, [&fn](int64_t, int64_t begin, int64_t end) { fn(begin, end); });
  }

  // As parallel_for, split into exactly `chunks` balanced ranges (clamped
  // to [1, n]), for a caller that sizes its chunks itself: many short ones,
  // so that a thread descheduled on a busy machine holds back at most one
  // short chunk while the others take the rest.
  template <class F>
  void parallel_ranges(int64_t n, int64_t chunks, F &&fn) {
    using Fn = std::remove_reference_t<F>;
    run(n, std::max<int64_t>(1, std::min(chunks, n)),
        [](void *ctx, int64_t, int64_t begin, int64_t end) { (*static_cast<Fn *>(ctx))(begin, end); },
        const_cast<void *>(static_cast<const void *>(&fn)));
  }

  // As parallel_for, but fn(chunk, begin, end) also gets the chunk's index
  // in [0, chunk_count(n, grain)), for per-chunk partial results that the
  // caller combines in chunk order (deterministic for a given pool size).
  template <class F>
  void parallel_chunks(int64_t n, int64_t grain, F &&fn) {
    using Fn = std::remove_reference_t<F>;
    run(n, chunk_count(n, grain),
        [](void *ctx, int64_t chunk, int64_t begin, int64_t end) { (*static_cast<Fn *>(ctx))(chunk, begin, end); },
        const_cast<void *>(static_cast<const void *>(&fn)));
  }

 private:
  using Trampoline = void (*)(void *ctx, int64_t chunk, int64_t begin, int64_t end);

  void run(int64_t n, int64_t chunks, Trampoline fn, void *ctx);
  // Claims and runs chunks of job `generation` until none is left.
  void work_on(uint64_t generation);
  void worker_main();
  // Stops and joins the workers (destructor, failed constructor).
  void shutdown();

  int64_t size_ = 1;
  std::vector<std::thread> workers_;

  // The current job. `state_` packs the job's generation (high 32 bits) and
  // the next unclaimed chunk (low 32 bits), so a worker that arrives late
  // can never claim a chunk of a newer job by mistake. Before writing the
  // next job's fields, run() closes the finished job (its next chunk set to
  // kChunkMask, past any chunk count), so that a late worker cannot claim a
  // chunk of the old generation with fields of the new job either. The job
  // fields are atomics because a late worker may read them while the next
  // job's caller writes them; it then fails to claim and never uses what it
  // read.
  std::atomic<uint64_t> state_{0};
  std::atomic<Trampoline> job_fn_{nullptr};
  std::atomic<void *> job_ctx_{nullptr};
  std::atomic<int64_t> job_n_{0};
  std::atomic<int64_t> job_chunks_{0};
  std::atomic<uint32_t> job_fp_control_{0};
  std::atomic<int64_t> chunks_done_{0};
  std::exception_ptr job_error_;  // guarded by error_mutex_
  std::mutex error_mutex_;

  std::mutex busy_;  // held by the thread whose job runs

  // Sleeping workers wait here for a new generation or for stop_.
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int64_t> sleepers_{0};
  std::atomic<bool> stop_{false};
  // Workers that have entered worker_main: the constructor returns only when
  // all have, so no thread start-up (which allocates, e.g. in the C library
  // or a sanitizer's runtime) happens later, in some call's time.
  std::atomic<int64_t> started_{0};
};

}  // namespace kiln
