#include "backend/cuda/planning/graph_runs.hpp"

#include <tuple>
#include <utility>

#include "core/error.hpp"

namespace kiln::cuda {

GraphRuns::GraphRuns(StepLauncher &launcher, std::function<void(const std::string &)> on_fallback)
    : launcher_(launcher), on_fallback_(std::move(on_fallback)) {}

GraphRuns::~GraphRuns() {
  for (auto &g : graphs_) launcher_.destroy(g.second);
}

void GraphRuns::fall_back(const std::string &why) {
  fallback_reason_ = why.empty() ? "an unknown error" : why;
  for (auto &g : graphs_) launcher_.destroy(g.second);
  graphs_.clear();
  if (on_fallback_) on_fallback_(fallback_reason_);
}

StepLauncher::Graph GraphRuns::graph(int64_t steps) {
  auto found = graphs_.find(steps);
  if (found != graphs_.end()) return found->second;
  const size_t multi_step = graphs_.size() - graphs_.count(1);
  if (steps != 1 && (steps > kMaxGraphSteps || multi_step >= kMaxGraphs)) return nullptr;
  StepLauncher::Graph g = launcher_.capture(steps);
  graphs_[steps] = g;
  return g;
}

std::pair<int64_t, StepLauncher::Graph> GraphRuns::shorter_graph(int64_t count) const {
  std::pair<int64_t, StepLauncher::Graph> best{0, nullptr};
  for (const auto &g : graphs_)  // by length, ascending
    if (g.first > 1 && g.first < count && count - g.first <= kTopUpSteps) best = g;
  return best;
}

void GraphRuns::run(int64_t first, int64_t count) {
  if (count <= 0) return;
  if (fell_back()) return launcher_.run_table_steps(first, count);
  launcher_.set_cursor(first);
  if (!warm_) {
    launcher_.run_cursor_step();
    warm_ = true;
    ++first, --count;
    if (count == 0) return;
  }
  // Steps first + done onwards are not queued yet.
  int64_t done = 0;
  try {
    // A graph of exactly `count` steps (cached, or captured now) unless a
    // shorter cached one can be topped up.
    int64_t covered = count;
    StepLauncher::Graph body = nullptr;
    if (!graphs_.count(count)) std::tie(covered, body) = shorter_graph(count);
    if (!body) body = graph(count), covered = count;
    if (body) {
      launcher_.launch(body);
      done = covered;
    }
    if (done < count) {
      StepLauncher::Graph one = graph(1);
      for (; done < count; ++done) launcher_.launch(one);
    }
  } catch (const Error &e) {
    fall_back(e.what());
    launcher_.run_table_steps(first + done, count - done);
  }
}

std::string GraphRuns::describe() const {
  if (fell_back()) return "CUDA graphs off after a failed capture: " + fallback_reason_;
  if (graphs_.empty()) return "CUDA graphs (captured at the second step)";
  std::string lengths;
  for (const auto &g : graphs_) lengths += (lengths.empty() ? "" : ", ") + std::to_string(g.first);
  return "CUDA graphs of " + lengths + " steps";
}

}  // namespace kiln::cuda
