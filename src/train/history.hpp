// History: the per-epoch statistics kiln_trainer_fit returns.
#pragma once

#include <vector>

#include "kiln/kiln.h"

namespace kiln {

struct History {
  std::vector<kiln_epoch_stats> epochs;
};

}  // namespace kiln
