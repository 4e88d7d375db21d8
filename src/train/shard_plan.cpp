#include "train/shard_plan.hpp"

namespace kiln {

int64_t ShardPlan::count(int64_t n, bool pad) const {
  if (pad) return (n + ranks - 1) / ranks;
  return rank < n ? (n - rank + ranks - 1) / ranks : 0;
}

std::vector<int64_t> ShardPlan::positions(int64_t n, bool pad) const {
  std::vector<int64_t> p(size_t(count(n, pad)));
  for (size_t j = 0; j < p.size(); ++j) p[j] = (rank + int64_t(j) * ranks) % n;
  return p;
}

}  // namespace kiln
