// Which steps of a CUDA executable run through which CUDA graph, and what
// happens when a capture fails: plain C++ without CUDA, in kiln_internal, so
// the CPU tests run it against a launcher that can fail
// (tests/cuda_planning_test.cpp). CudaExecutable (program.cpp) is the
// launcher that streams and graphs stand behind.
//
// run(first, count) runs steps first .. first + count - 1, each exactly once:
//  - the first step an executable runs is eager (through the cursor), so
//    every kernel is loaded and every library plan made outside a capture;
//  - the rest as one graph of that many steps (captured the first time the
//    length is seen; up to kMaxGraphs lengths of at most kMaxGraphSteps
//    steps are kept), or the one-step graph launched once per step;
//  - but a run at most kTopUpSteps longer than a graph already captured
//    launches that graph and the one-step graph for the rest, rather than
//    capture a new length: a trainer's first epoch runs one step eagerly
//    and captures the other n - 1, and every later epoch of n steps then
//    reuses that graph (capturing hundreds of steps again cost tens of
//    milliseconds per length on an H200, more than the epoch itself);
//  - a capture or a launch that fails switches graphs off for this
//    executable for good: the reason goes to on_fallback once, and the steps
//    not yet queued run eagerly from the step table. So a trainer's step
//    counters, which count the steps run() returned for, stay right.
// Errors of the eager runs (a device fault) propagate.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace kiln::cuda {

class StepLauncher {
 public:
  using Graph = void *;  // an instantiated graph (cudaGraphExec_t), opaque here
  virtual ~StepLauncher() = default;
  // Points the device-resident cursor at step `first`.
  virtual void set_cursor(int64_t first) = 0;
  // One step, eagerly, through the cursor (which it advances).
  virtual void run_cursor_step() = 0;
  // Captures `steps` steps through the cursor; throws kiln::Error when it cannot.
  virtual Graph capture(int64_t steps) = 0;
  // Queues g (which advances the cursor by its steps); throws kiln::Error.
  virtual void launch(Graph g) = 0;
  virtual void destroy(Graph g) noexcept = 0;
  // Steps first .. first + count - 1, eagerly, step s reading table entry s.
  virtual void run_table_steps(int64_t first, int64_t count) = 0;
};

class GraphRuns {
 public:
  static constexpr int64_t kMaxGraphSteps = 1024;  // longer runs replay the one-step graph
  static constexpr size_t kMaxGraphs = 4;          // distinct lengths kept, besides the one-step graph
  static constexpr int64_t kTopUpSteps = 32;       // one-step launches added to a shorter graph, at most

  // on_fallback receives, once, why graphs were switched off.
  GraphRuns(StepLauncher &launcher, std::function<void(const std::string &)> on_fallback);
  ~GraphRuns();
  GraphRuns(const GraphRuns &) = delete;
  GraphRuns &operator=(const GraphRuns &) = delete;

  void run(int64_t first, int64_t count);

  // "CUDA graphs (captured at the second step)", "CUDA graphs of 1, 468
  // steps", or "CUDA graphs off after a failed capture: <why>".
  std::string describe() const;
  bool fell_back() const { return !fallback_reason_.empty(); }

 private:
  StepLauncher::Graph graph(int64_t steps);  // cached, captured now, or null (use the one-step graph)
  // The longest cached multi-step graph shorter than `count` by at most
  // kTopUpSteps, and its length; {0, null} when there is none.
  std::pair<int64_t, StepLauncher::Graph> shorter_graph(int64_t count) const;
  void fall_back(const std::string &why);

  StepLauncher &launcher_;
  std::function<void(const std::string &)> on_fallback_;
  std::map<int64_t, StepLauncher::Graph> graphs_;  // by steps
  bool warm_ = false;                              // the first, eager step has run
  std::string fallback_reason_;                    // non-empty: graphs are off
};

}  // namespace kiln::cuda
