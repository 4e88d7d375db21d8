#include "train/program_cache.hpp"

#include <algorithm>

namespace kiln {

Executable *ProgramCache::find(const StepKey &key) {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].first == key) {
      std::rotate(entries_.begin() + long(i), entries_.begin() + long(i) + 1, entries_.end());
      return entries_.back().second.get();
    }
  return nullptr;
}

}  // namespace kiln
