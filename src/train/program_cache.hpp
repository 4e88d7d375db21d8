// A trainer's compiled step programs, by StepKey (train/step_builder.hpp):
// everything a program depends on that can change during the trainer's
// life, the data source by value and by its never-reused identity included.
// So a program is never run for what it was not built for: not after
// kiln_dataset_set_normalization, not for another split of the same data,
// not for a dataset that took the memory of a released one. The CUDA
// graphs a backend captures from a program belong to its Executable and go
// with it.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "core/backend.hpp"
#include "train/step_builder.hpp"

namespace kiln {

class ProgramCache {
 public:
  // Programs kept (training, evaluation, last batches...); the least
  // recently used goes first.
  static constexpr size_t kCapacity = 8;

  // The program for key: the cached one, else compile()'s (a
  // std::unique_ptr<Executable>), which is kept.
  template <class Compile> Executable &get(const StepKey &key, Compile &&compile) {
    if (Executable *found = find(key)) return *found;
    std::unique_ptr<Executable> exe = compile();
    if (entries_.size() >= kCapacity) entries_.erase(entries_.begin());
    entries_.emplace_back(key, std::move(exe));
    return *entries_.back().second;
  }
  // Forgets every program (their buffers are gone).
  void clear() { entries_.clear(); }
  size_t size() const { return entries_.size(); }

 private:
  // The program for key, made the most recently used; null when none.
  Executable *find(const StepKey &key);

  std::vector<std::pair<StepKey, std::unique_ptr<Executable>>> entries_;  // most recently used last
};

}  // namespace kiln
