// The contract between libkiln and the distributed plugin, libkiln_dist.so,
// which holds the communication engines (Open MPI, and NCCL when it was
// built with CUDA) so that libkiln.so links neither and loads on machines
// without them. libkiln dlopen()s the plugin the first time a communicator is
// created (from libkiln's directory or KILN_BACKEND_PATH, like
// libkiln_cuda.so, through plugin/loader.hpp, which refuses a plugin of
// another build).
#pragma once

#include <cstdint>

#include "core/collective.hpp"

extern "C" {
// A communicator over every process of the MPI job (a duplicate of
// MPI_COMM_WORLD), initializing MPI first when the host program has not.
// Collective over all processes. On failure returns null, writes the status
// and why into *status and reason[0..reason_size). Never throws.
typedef kiln::Collective *(*kiln_dist_create_mpi_fn)(kiln_status *status, char *reason, int64_t reason_size);
// One communicator per GPU of devices[0..count) (CUDA indices, distinct, all
// existing: checked by libkiln), rank i on devices[i], over NCCL alone, into
// out[0..count). Returns KILN_OK, or a status with why in reason (nothing
// in out then): NOT_SUPPORTED from a plugin built without NCCL. Never throws.
typedef kiln_status (*kiln_dist_create_local_fn)(const int64_t *devices, int64_t count, kiln::Collective **out,
                                                 char *reason, int64_t reason_size);
}
