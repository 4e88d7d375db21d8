// The CPU backend's thread pool (core/thread_pool.hpp) on its own: chunks,
// errors, nesting, concurrent callers, serial scopes, and the job protocol under a stress
// that once broke it. Linked with kiln_internal. Fast enough for the TSan
// lane (scripts/test.sh's TSAN_TESTS), where a chunk run late or twice is
// also a data race on the caller's stack.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "backend_harness.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"

using namespace kiln;
using test::g_case;
using test::status_of;

namespace {

void test_chunks_errors_and_callers() {
  g_case = "thread pool";
  ThreadPool pool(4);
  CHECK(pool.size() == 4);
  CHECK(pool.chunk_count(10, 100) == 1 && pool.chunk_count(1000, 100) == 10 && pool.chunk_count(250, 100) == 3);
  CHECK(pool.chunk_count(100000, 100) == 16);  // at most four per thread
  std::vector<int> hits(100000, 0);
  pool.parallel_for(100000, 1000, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) ++hits[size_t(i)]; });
  bool once = true;
  for (int h : hits) once = once && h == 1;
  CHECK(once);
  // An exception in one chunk reaches the caller, after all chunks ended.
  bool thrown = false;
  try {
    pool.parallel_for(4000, 1000, [&](int64_t b, int64_t) {
      if (b >= 2000) throw Error(KILN_ERROR_INVALID_ARGUMENT, "chunk failed");
    });
  } catch (const Error &e) {
    thrown = e.status() == KILN_ERROR_INVALID_ARGUMENT;
  }
  CHECK(thrown);
  // Nested loops run serially instead of deadlocking; concurrent callers
  // either share the pool or run on their own thread, always completely.
  std::atomic<int64_t> total{0};
  pool.parallel_for(8, 1, [&](int64_t b, int64_t e) {
    pool.parallel_for(1000, 10, [&](int64_t b2, int64_t e2) { total += (e - b) * (e2 - b2); });
  });
  CHECK(total == 8000);
  std::atomic<int64_t> sum{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 6; ++t) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 300; ++rep) {
        std::atomic<int64_t> local{0};
        pool.parallel_for(10000, 100, [&](int64_t b, int64_t e) { local += e - b; });
        sum += local;
      }
    });
  }
  for (auto &c : callers) c.join();
  CHECK(sum == int64_t(6) * 300 * 10000);
  // A pool with one thread runs everything on the caller.
  ThreadPool single(1);
  int64_t count = 0;
  single.parallel_for(1000000, 1, [&](int64_t b, int64_t e) { count += e - b; });
  CHECK(count == 1000000);
  CHECK(status_of([] { ThreadPool bad(-1); }) == KILN_ERROR_INVALID_ARGUMENT);
}

// A worker that comes late to a job, after the other threads finished all
// of its chunks, must claim no chunk of the next job: each chunk runs once,
// and parallel_ranges returns only after all ran. A late worker reads the
// job's fields, then claims; jobs of two chunks alternate here with jobs of
// eight, so that such a worker can read the next job's chunk count (eight)
// while the finished job's state (chunk 2 of 2) is still there. Until the
// pool closed a finished job before writing the next one's fields
// (thread_pool.cpp, run), it then claimed chunk 2, 3, ... of the old
// generation and ran them with the new job's (or the dead previous job's)
// function: items marked twice, or marked after the call returned; in
// training, a kernel's lambda run on a stack frame since reused (what
// ThreadSanitizer reported in `kiln train --threads 16`, and the likely
// cause of test_fashion_mnist's NaN loss on a 16-core machine). Each job
// marks plain memory on the caller's frame, as a kernel's lambda writes
// its captures. A race: each pool size runs jobs for a second, and the
// first wrong mark fails. With the job left open (the bug), 10 of 10 runs
// failed within the first pool, after 76 to 244,062 jobs (2-core build
// machine); counting into atomics instead, as this test first did, it took
// up to 1.8 million.
void test_late_worker() {
  g_case = "thread pool: late worker";
  for (int64_t threads : {3, 8}) {
    ThreadPool pool(threads);
    constexpr int64_t n = 8;
    int64_t jobs = 0, bad_job = -1, bad_item = -1, bad_marks = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
    for (; bad_job < 0 && (jobs % 1024 != 0 || std::chrono::steady_clock::now() < until); ++jobs) {
      int64_t marks[n] = {};
      pool.parallel_ranges(n, jobs % 2 == 0 ? 2 : n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) marks[i] += 1;
      });
      for (int64_t i = 0; i < n && bad_job < 0; ++i) {
        if (marks[i] != 1) bad_job = jobs, bad_item = i, bad_marks = marks[i];
      }
    }
    if (bad_job >= 0) {
      std::fprintf(stderr, "pool of %lld threads, job %lld of %lld items: item %lld marked %lld times, want 1\n",
                   (long long)threads, (long long)bad_job, (long long)n, (long long)bad_item, (long long)bad_marks);
    }
    CHECK(bad_job < 0);
  }
}

// Where each chunk of a job ran: (chunk, begin, end, thread) in the order
// the chunks started. Each chunk sleeps `pause`, so that a pool's workers,
// if the job may use them, have time to wake and claim some.
using Run = std::tuple<int64_t, int64_t, int64_t, std::thread::id>;
std::vector<Run> chunks_run(ThreadPool &pool, int64_t n, int64_t grain, std::chrono::milliseconds pause) {
  std::vector<Run> runs;
  std::mutex m;
  pool.parallel_chunks(n, grain, [&](int64_t c, int64_t b, int64_t e) {
    {
      std::lock_guard<std::mutex> lock(m);
      runs.emplace_back(c, b, e, std::this_thread::get_id());
    }
    std::this_thread::sleep_for(pause);
  });
  return runs;
}

bool all_on(const std::vector<Run> &runs, std::thread::id id) {
  for (const Run &r : runs) {
    if (std::get<3>(r) != id) return false;
  }
  return true;
}

// A SerialScope runs its thread's jobs on that thread, chunk after chunk in
// order, with the split the pool would use, so a reduction over chunks in
// chunk order gives the same bits; it nests, and neither outlives itself
// nor reaches other threads' jobs.
void test_serial_scope() {
  g_case = "thread pool: serial scope";
  ThreadPool pool(4);
  const auto me = std::this_thread::get_id();
  const int64_t chunks = pool.chunk_count(1000, 10);
  CHECK(chunks == 16);
  std::vector<Run> serial;
  {
    ThreadPool::SerialScope scope;
    serial = chunks_run(pool, 1000, 10, std::chrono::milliseconds(0));
    {
      ThreadPool::SerialScope inner;
    }
    CHECK(all_on(chunks_run(pool, 1000, 10, std::chrono::milliseconds(1)), me));  // still serial after `inner`
    // Another thread's job may use the workers: some chunk runs off that thread.
    std::thread other([&] {
      const auto runs = chunks_run(pool, 1000, 10, std::chrono::milliseconds(3));
      CHECK(!all_on(runs, std::this_thread::get_id()));
    });
    other.join();
  }
  CHECK(int64_t(serial.size()) == chunks && all_on(serial, me));
  bool in_order = true;
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t begin, end;
    chunk_range(1000, chunks, c, &begin, &end);
    in_order = in_order && serial[size_t(c)] == Run(c, begin, end, me);
  }
  CHECK(in_order);
  // After the scope, the workers take part again.
  CHECK(!all_on(chunks_run(pool, 1000, 10, std::chrono::milliseconds(3)), me));

  // Partial sums per chunk, added in chunk order: the same bits either way.
  std::vector<float> x(100000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f / float(i + 1) * (i % 3 == 0 ? -1.0f : 1.0f);
  auto sum = [&] {
    std::vector<float> parts(size_t(pool.chunk_count(int64_t(x.size()), 1000)), 0.0f);
    pool.parallel_chunks(int64_t(x.size()), 1000, [&](int64_t c, int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) parts[size_t(c)] += x[size_t(i)];
    });
    float total = 0;
    for (float p : parts) total += p;
    return total;
  };
  const float parallel = sum();
  ThreadPool::SerialScope scope;
  CHECK(sum() == parallel);
}

}  // namespace

int main() {
  try {
    test_chunks_errors_and_callers();
    test_late_worker();
    test_serial_scope();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "thread_pool_test: unexpected exception: %s\n", e.what());
    return 1;
  }
  return test::finish("thread_pool_test");
}
