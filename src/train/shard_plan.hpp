// Which samples of a pass each rank of data-parallel training takes, as
// PyTorch's DistributedSampler: rank r of N takes positions r, r + N,
// r + 2N, ... of the pass's (shuffled) order. A training pass pads the
// order by wrapping around to a multiple of N, so every rank runs the same
// number of steps (a few samples count twice); an evaluation pass does not,
// so every sample counts once. One process is rank 0 of 1: every position.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln {

struct ShardPlan {
  int64_t rank = 0, ranks = 1;

  // The positions this rank takes of a pass over n samples.
  int64_t count(int64_t n, bool pad) const;
  // Those positions, in order: (rank + j * ranks) mod n for j < count.
  std::vector<int64_t> positions(int64_t n, bool pad) const;
};

}  // namespace kiln
