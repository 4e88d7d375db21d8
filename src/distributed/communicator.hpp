// The front end of distributed training inside libkiln: loads the
// distributed plugin libkiln_dist.so on first use (see distributed/plugin.hpp) and
// creates communicators through it. libkiln.so links no communication
// engine; a machine without the plugin or without Open MPI gets
// DEVICE_UNAVAILABLE with the loader's reason.
#pragma once

#include <memory>
#include <vector>

#include "core/collective.hpp"
#include "core/context.hpp"

namespace kiln {

// A communicator over every process of the MPI job (collective: every
// process must call it). Initializes MPI when the host program has not.
std::shared_ptr<Collective> create_mpi_communicator(const Context &ctx);

// One communicator per GPU of devices (CUDA, distinct, existing in ctx),
// rank i on devices[i], over NCCL alone: for one thread per GPU in one
// process. NOT_SUPPORTED from a plugin built without NCCL.
std::vector<std::shared_ptr<Collective>> create_local_communicators(const Context &ctx,
                                                                    const std::vector<Device> &devices);

}  // namespace kiln
