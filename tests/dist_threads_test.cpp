// MPI communicators driven from several threads of each rank at once, as two
// trainers on two threads do (kiln.h: different communicators may be used by
// different threads at once). MPI's thread level is the process's: below
// MPI_THREAD_MULTIPLE, two threads inside MPI at once is undefined (Open MPI
// then runs without its own locks), and may pass unnoticed many times: the
// collectives below gave right results before kiln serialized its MPI
// calls, with half of them overlapping another. So this program also watches
// every MPI call the plugin makes (the MPI profiling interface: its own
// MPI_* functions, exported, come before libmpi's, and call PMPI_*): two
// threads inside MPI at once below MULTIPLE, or a thread other than the
// main one below SERIALIZED, is counted and fails the run. Run under
// `mpirun -np 2` (tests/CMakeLists.txt):
//
//   dist_threads_test             kiln initializes MPI: it asks for
//                                 MPI_THREAD_MULTIPLE; two threads of each
//                                 rank then run collectives on their own
//                                 communicators at once, every result checked
//                                 against its closed form
//   dist_threads_test serialized  the host program initialized MPI at
//                                 MPI_THREAD_SERIALIZED: the same concurrent
//                                 collectives must be as right (kiln makes
//                                 one MPI call at a time in the process)
//   dist_threads_test funneled    the host program initialized MPI at
//                                 MPI_THREAD_FUNNELED: only its main thread
//                                 may call MPI, so a communicator created or
//                                 used from another thread is refused with
//                                 NOT_SUPPORTED, and the main thread's
//                                 communicators go on working
//   dist_threads_test single      the same at MPI_THREAD_SINGLE (plain MPI_Init)
#include <mpi.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend_harness.hpp"
#include "distributed/communicator.hpp"

namespace kiln {
namespace {

// ---- the watch over the plugin's MPI calls ---------------------------------

std::atomic<int> g_inside{0};          // threads inside a watched MPI call now
std::atomic<long> g_calls{0};          // watched calls made
std::atomic<long> g_overlaps{0};       // calls made while another thread was inside one
std::atomic<long> g_off_main{0};       // calls made off the main thread below SERIALIZED
std::atomic<bool> g_main_only{false};  // below SERIALIZED: only g_main_thread may call
std::thread::id g_main_thread;
thread_local int t_depth = 0;  // MPI calling MPI on the same thread is one call

class Watched {
 public:
  // any_thread: a call MPI allows from any thread at any level, not
  // counted (MPI 3.1, 12.4: MPI_Initialized, MPI_Finalized,
  // MPI_Query_thread, MPI_Is_thread_main, MPI_Get_library_version).
  explicit Watched(bool any_thread = false) : watched_(!any_thread), outer_(watched_ && t_depth++ == 0) {
    if (!outer_) return;
    g_calls.fetch_add(1);
    if (g_inside.fetch_add(1) > 0) g_overlaps.fetch_add(1);
    if (g_main_only.load() && std::this_thread::get_id() != g_main_thread) g_off_main.fetch_add(1);
  }
  ~Watched() {
    if (watched_) --t_depth;
    if (outer_) g_inside.fetch_sub(1);
  }
  Watched(const Watched &) = delete;
  Watched &operator=(const Watched &) = delete;

 private:
  bool watched_, outer_;
};

}  // namespace
}  // namespace kiln

// Every MPI function the plugin calls (src/distributed/plugin/mpi_collective.cpp).
extern "C" {
int MPI_Initialized(int *flag) {
  kiln::Watched w(true);
  return PMPI_Initialized(flag);
}
int MPI_Finalized(int *flag) {
  kiln::Watched w(true);
  return PMPI_Finalized(flag);
}
int MPI_Query_thread(int *provided) {
  kiln::Watched w(true);
  return PMPI_Query_thread(provided);
}
int MPI_Is_thread_main(int *flag) {
  kiln::Watched w(true);
  return PMPI_Is_thread_main(flag);
}
int MPI_Error_string(int code, char *text, int *len) {
  kiln::Watched w;
  return PMPI_Error_string(code, text, len);
}
int MPI_Comm_idup(MPI_Comm comm, MPI_Comm *out, MPI_Request *request) {
  kiln::Watched w;
  return PMPI_Comm_idup(comm, out, request);
}
int MPI_Comm_free(MPI_Comm *comm) {
  kiln::Watched w;
  return PMPI_Comm_free(comm);
}
int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler handler) {
  kiln::Watched w;
  return PMPI_Comm_set_errhandler(comm, handler);
}
int MPI_Comm_rank(MPI_Comm comm, int *rank) {
  kiln::Watched w;
  return PMPI_Comm_rank(comm, rank);
}
int MPI_Comm_size(MPI_Comm comm, int *size) {
  kiln::Watched w;
  return PMPI_Comm_size(comm, size);
}
int MPI_Get_library_version(char *version, int *len) {
  kiln::Watched w(true);
  return PMPI_Get_library_version(version, len);
}
int MPI_Get_processor_name(char *name, int *len) {
  kiln::Watched w;
  return PMPI_Get_processor_name(name, len);
}
int MPI_Iallreduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   MPI_Request *request) {
  kiln::Watched w;
  return PMPI_Iallreduce(in, out, count, type, op, comm, request);
}
int MPI_Ibcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request *request) {
  kiln::Watched w;
  return PMPI_Ibcast(buf, count, type, root, comm, request);
}
int MPI_Iallgather(const void *in, int in_count, MPI_Datatype in_type, void *out, int out_count, MPI_Datatype out_type,
                   MPI_Comm comm, MPI_Request *request) {
  kiln::Watched w;
  return PMPI_Iallgather(in, in_count, in_type, out, out_count, out_type, comm, request);
}
int MPI_Test(MPI_Request *request, int *done, MPI_Status *status) {
  kiln::Watched w;
  return PMPI_Test(request, done, status);
}
}  // extern "C"

namespace kiln {
namespace {

using test::expect;
using test::status_of;

constexpr int kThreads = 2;
constexpr int kRounds = 150;
// Small messages go through MPI's short-message algorithms in one round
// trip; the large ones through its segmented ones, many tests to complete.
constexpr int64_t kSizes[] = {1, 7, 1000, 65536 + 3};

std::shared_ptr<Context> make_context() {
  ContextOptions options;
  options.threads = 1;
  options.log_level = KILN_LOG_ERROR;
  return Context::create(options, backend_registry());
}

// Every result a thread gets wrong, counted over all threads.
std::atomic<int> g_wrong{0};

void wrong(const std::string &what) {
  if (g_wrong.fetch_add(1) < 10) std::fprintf(stderr, "FAIL %s\n", what.c_str());
}

// One round of each collective on comm, by thread `thread`; every value is
// a small integer (or a half) that float arithmetic holds exactly, so each
// result must equal its closed form exactly.
void round_of_collectives(Collective &comm, int thread, int round) {
  const int64_t rank = comm.rank(), size = comm.size();
  const int64_t n = kSizes[round % 4];
  const std::string where =
      "thread " + std::to_string(thread) + " round " + std::to_string(round) + " rank " + std::to_string(rank) + ": ";
  // f64 sum: rank r holds (r + 1)(i + 1) + c, so the sum is (i + 1) S(S + 1)/2 + S c.
  const double c = thread * 1e6 + round;
  std::vector<double> f64(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) f64[size_t(i)] = double((rank + 1) * (i + 1)) + c;
  comm.allreduce(Device::cpu(), DType::F64, f64.data(), n, false);
  for (int64_t i = 0; i < n; ++i) {
    const double want = double((i + 1) * size * (size + 1) / 2) + double(size) * c;
    if (f64[size_t(i)] != want) {
      wrong(where + "f64 sum [" + std::to_string(i) + "] = " + std::to_string(f64[size_t(i)]) + ", not " +
            std::to_string(want));
      break;
    }
  }
  // i64 sum with values above 2^32, so a 32-bit reduction would show.
  const int64_t big = (int64_t(thread) + 1) << 40;
  std::vector<int64_t> i64(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) i64[size_t(i)] = (rank + 1) * (i + 1) + big + round;
  comm.allreduce(Device::cpu(), DType::I64, i64.data(), n, false);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t want = (i + 1) * size * (size + 1) / 2 + size * (big + round);
    if (i64[size_t(i)] != want) {
      wrong(where + "i64 sum [" + std::to_string(i) + "] = " + std::to_string(i64[size_t(i)]) + ", not " +
            std::to_string(want));
      break;
    }
  }
  // f32 mean: rank r holds r + 1 + d, so the mean is (S + 1)/2 + d.
  std::vector<float> f32(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) f32[size_t(i)] = float(rank + 1 + (i % 7) + thread * 8);
  comm.allreduce(Device::cpu(), DType::F32, f32.data(), n, true);
  for (int64_t i = 0; i < n; ++i) {
    const double want = double(size + 1) / 2 + double(i % 7 + thread * 8);
    if (std::fabs(double(f32[size_t(i)]) - want) > 1e-6 * want) {
      wrong(where + "f32 mean [" + std::to_string(i) + "] = " + std::to_string(f32[size_t(i)]) + ", not " +
            std::to_string(want));
      break;
    }
  }
  // Broadcast from a root that changes every round.
  const int64_t root = round % size;
  auto pattern = [&](int64_t i) { return char((root * 31 + i * 7 + thread + round) & 0xff); };
  std::vector<char> bytes(size_t(n * 8), char(0xAA));
  if (rank == root)
    for (int64_t i = 0; i < n * 8; ++i) bytes[size_t(i)] = pattern(i);
  comm.broadcast(Device::cpu(), bytes.data(), n * 8, root);
  for (int64_t i = 0; i < n * 8; ++i)
    if (bytes[size_t(i)] != pattern(i)) {
      wrong(where + "broadcast byte " + std::to_string(i) + " from root " + std::to_string(root));
      break;
    }
  // Allgather: rank r's (r, thread, round) at slot r.
  const int64_t mine[3] = {rank, thread, round};
  std::vector<int64_t> all(size_t(3 * size), -1);
  comm.allgather(mine, sizeof mine, all.data());
  for (int64_t r = 0; r < size; ++r)
    if (all[size_t(3 * r)] != r || all[size_t(3 * r + 1)] != thread || all[size_t(3 * r + 2)] != round) {
      wrong(where + "allgather slot " + std::to_string(r));
      break;
    }
}

// comms[t] driven by thread t, all at once: kRounds rounds each.
void drive_concurrently(std::vector<std::shared_ptr<Collective>> &comms) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  std::vector<std::string> errors(comms.size());
  for (size_t t = 0; t < comms.size(); ++t)
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < int(comms.size())) std::this_thread::yield();  // start together
      status_of(
          [&] {
            for (int round = 0; round < kRounds; ++round) round_of_collectives(*comms[t], int(t), round);
          },
          &errors[t]);
    });
  for (std::thread &t : threads) t.join();
  for (size_t t = 0; t < comms.size(); ++t) expect(errors[t].empty(), "thread " + std::to_string(t) + ": " + errors[t]);
}

// Communicators are created in the same order on every rank, from one
// thread: creation is collective over MPI_COMM_WORLD.
std::vector<std::shared_ptr<Collective>> make_communicators(const Context &ctx, int count) {
  std::vector<std::shared_ptr<Collective>> comms;
  for (int i = 0; i < count; ++i) {
    comms.push_back(create_mpi_communicator(ctx));
    comms.back()->set_timeout(120);  // a lost message fails the test instead of hanging it
  }
  return comms;
}

int thread_level() {
  int level = -1;
  MPI_Query_thread(&level);
  return level;
}

// kiln initializes MPI and asks for MPI_THREAD_MULTIPLE, so that its
// communicators, and the host program's own MPI calls, may run on several
// threads at once. Debian's Open MPI provides it.
void kiln_initializes(const Context &ctx) {
  test::g_case = "kiln initializes MPI";
  std::vector<std::shared_ptr<Collective>> comms = make_communicators(ctx, kThreads);
  expect(thread_level() == MPI_THREAD_MULTIPLE, "MPI's thread level is " + std::to_string(thread_level()) +
                                                    ", not MPI_THREAD_MULTIPLE (" +
                                                    std::to_string(MPI_THREAD_MULTIPLE) + ")");
  test::g_case = "two communicators on two threads at once";
  drive_concurrently(comms);
}

// The host program chose MPI_THREAD_SERIALIZED: kiln's calls on two threads
// must still be right.
void host_serialized(const Context &ctx) {
  test::g_case = "two communicators on two threads at once, MPI_THREAD_SERIALIZED";
  std::vector<std::shared_ptr<Collective>> comms = make_communicators(ctx, kThreads);
  drive_concurrently(comms);
}

// The host program chose a level below SERIALIZED, named `name`:
// only its main thread (this one) may call MPI.
void host_main_thread_only(const Context &ctx, const std::string &name) {
  test::g_case = name + ": another thread";
  std::vector<std::shared_ptr<Collective>> comms = make_communicators(ctx, 2);
  kiln_status created = KILN_OK, used = KILN_OK, again = KILN_OK;
  std::string created_why, used_why, again_why;
  std::thread other([&] {
    created = status_of([&] { create_mpi_communicator(ctx); }, &created_why);
    double x = 1;
    used = status_of([&] { comms[0]->allreduce(Device::cpu(), DType::F64, &x, 1, false); }, &used_why);
  });
  other.join();
  expect(created == KILN_ERROR_NOT_SUPPORTED,
         std::string("creating from another thread: ") + kiln_status_name(created) + ": " + created_why);
  expect(used == KILN_ERROR_NOT_SUPPORTED,
         std::string("an allreduce from another thread: ") + kiln_status_name(used) + ": " + used_why);
  for (const std::string &why : {created_why, used_why})
    expect(why.find(name) != std::string::npos && why.find("main thread") != std::string::npos,
           "the message names the level and the main thread: " + why);
  // The refused communicator stays broken on every rank (the ranks can no
  // longer agree on what was exchanged), even from the main thread.
  double x = 1;
  again = status_of([&] { comms[0]->allreduce(Device::cpu(), DType::F64, &x, 1, false); }, &again_why);
  expect(again == KILN_ERROR_COMMUNICATION && again_why.find(name) != std::string::npos,
         std::string("the refused communicator afterwards: ") + kiln_status_name(again) + ": " + again_why);

  test::g_case = name + ": the main thread";
  for (int round = 0; round < 8; ++round) round_of_collectives(*comms[1], 0, round);
}

struct Mode {
  const char *arg;
  int level;  // the host program's MPI_Init_thread; -1: kiln initializes MPI
  const char *level_name;
};
constexpr Mode kModes[] = {{"", -1, ""},
                           {"serialized", MPI_THREAD_SERIALIZED, "MPI_THREAD_SERIALIZED"},
                           {"funneled", MPI_THREAD_FUNNELED, "MPI_THREAD_FUNNELED"},
                           {"single", MPI_THREAD_SINGLE, "MPI_THREAD_SINGLE"}};

int run(const char *arg) {
  const Mode *mode = nullptr;
  for (const Mode &m : kModes)
    if (std::strcmp(arg, m.arg) == 0) mode = &m;
  if (!mode) {
    std::fprintf(stderr, "usage: dist_threads_test [serialized|funneled|single]\n");
    return 2;
  }
  if (mode->level >= 0) {
    int provided = -1;
    if (MPI_Init_thread(nullptr, nullptr, mode->level, &provided) != MPI_SUCCESS) {
      std::fprintf(stderr, "FAIL: MPI_Init_thread(%s) failed\n", mode->level_name);
      return 1;
    }
    // Where MPI gives more than asked for, this run's level cannot be had.
    if (provided != mode->level) {
      std::printf("SKIP %s: MPI_Init_thread(%s) provided %d\n", arg, mode->level_name, provided);
      MPI_Finalize();
      return 77;
    }
  }
  if (mode->level >= 0 && mode->level < MPI_THREAD_SERIALIZED) {
    g_main_thread = std::this_thread::get_id();
    g_main_only.store(true);
  }
  int failed = 0;
  {
    std::shared_ptr<Context> ctx = make_context();
    try {
      if (mode->level < 0) kiln_initializes(*ctx);
      else if (mode->level >= MPI_THREAD_SERIALIZED) host_serialized(*ctx);
      else host_main_thread_only(*ctx, mode->level_name);
    } catch (const std::exception &e) {
      std::fprintf(stderr, "FAIL [%s] unexpected exception: %s\n", test::g_case.c_str(), e.what());
      failed = 1;
    }
  }
  expect(g_wrong.load() == 0, std::to_string(g_wrong.load()) + " collective result(s) wrong");
  test::g_case = "the watch over MPI calls";
  expect(g_calls.load() > 100, "the watch saw only " + std::to_string(g_calls.load()) +
                                   " MPI calls of the plugin: is the executable's MPI_Test not interposed?");
  if (thread_level() < MPI_THREAD_MULTIPLE)
    expect(g_overlaps.load() == 0,
           std::to_string(g_overlaps.load()) + " MPI calls of " + std::to_string(g_calls.load()) +
               " made while another thread was inside MPI, at " + "thread level " + std::to_string(thread_level()));
  expect(g_off_main.load() == 0,
         std::to_string(g_off_main.load()) + " MPI calls made off the main thread below SERIALIZED");
  if (mode->level >= 0) MPI_Finalize();  // this program initialized MPI, so it finalizes it
  if (failed) return 1;
  return test::finish(arg[0] ? arg : "dist_threads_test");
}

}  // namespace
}  // namespace kiln

int main(int argc, char **argv) { return kiln::run(argc > 1 ? argv[1] : ""); }
