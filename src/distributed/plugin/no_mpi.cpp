// kiln_dist_create_mpi of a libkiln_dist.so built where MPI was not found
// (NCCL's communicators of one process only): a clear refusal, as a missing
// libmpi would give.
#include <cstdio>

#include "distributed/plugin.hpp"

extern "C" __attribute__((visibility("default"))) kiln::Collective *kiln_dist_create_mpi(kiln_status *status,
                                                                                         char *reason,
                                                                                         int64_t reason_size) {
  *status = KILN_ERROR_DEVICE_UNAVAILABLE;
  std::snprintf(reason, size_t(reason_size),
                "this libkiln_dist.so was built without MPI (no MPI was found when kiln was built): communicators "
                "over processes need Open MPI (build kiln where libopenmpi-dev is installed); "
                "kiln_communicator_create_local (NCCL, one process) works without it");
  return nullptr;
}
