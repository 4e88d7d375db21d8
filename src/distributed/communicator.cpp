#include "distributed/communicator.hpp"

#include "core/error.hpp"
#include "distributed/plugin.hpp"
#include "plugin/loader.hpp"

namespace kiln {

namespace {

// Loaded once per process and never unloaded: MPI can be initialized only
// once per process, and the plugin registers the atexit handler that
// finalizes it. DEVICE_UNAVAILABLE with the loader's reason when it cannot
// be used.
template <class Fn> Fn entry(const Context &ctx, const char *name) {
  bool first = false;
  const PluginLibrary &p =
      plugin_once({"libkiln_dist.so", "distributed",
                   "it needs Open MPI's libmpi (install openmpi-bin, or build kiln where MPI was found)",
                   {"kiln_dist_create_mpi", "kiln_dist_create_local"}},
                  &first);
  if (first) ctx.log(KILN_LOG_DEBUG, "the distributed plugin " + p.searched + ": " + (p.handle ? "loaded" : p.error));
  if (!p.handle) fail(KILN_ERROR_DEVICE_UNAVAILABLE, p.error);
  return reinterpret_cast<Fn>(p.symbol(name));
}

}  // namespace

std::shared_ptr<Collective> create_mpi_communicator(const Context &ctx) {
  const auto create_mpi = entry<kiln_dist_create_mpi_fn>(ctx, "kiln_dist_create_mpi");
  kiln_status status = KILN_ERROR_INTERNAL;
  char reason[512] = {};
  Collective *c = create_mpi(&status, reason, sizeof reason);
  if (!c) fail(status, "cannot create an MPI communicator: " + one_line(reason));
  std::shared_ptr<Collective> comm(c);
  ctx.log(KILN_LOG_INFO, "communicator: " + comm->describe() + ", this is rank " + std::to_string(comm->rank()));
  return comm;
}

std::vector<std::shared_ptr<Collective>> create_local_communicators(const Context &ctx,
                                                                    const std::vector<Device> &devices) {
  check(!devices.empty(), KILN_ERROR_INVALID_ARGUMENT, "a local communicator needs at least one device");
  // The list itself first: a CPU or a repeated device is the caller's
  // mistake (INVALID_ARGUMENT) on any machine, with CUDA or without.
  std::vector<int64_t> indices;
  for (const Device &d : devices) {
    check(!d.is_cpu(), KILN_ERROR_INVALID_ARGUMENT,
          "a local communicator runs NCCL on GPUs; " + d.str() + " is not one (CPU ranks run under mpirun)");
    for (int64_t seen : indices)
      check(seen != d.index, KILN_ERROR_INVALID_ARGUMENT, d.str() + " is listed twice");
    indices.push_back(d.index);
  }
  for (const Device &d : devices) ctx.validate(d);
  const auto create_local = entry<kiln_dist_create_local_fn>(ctx, "kiln_dist_create_local");
  std::vector<Collective *> raw(devices.size(), nullptr);
  char reason[512] = {};
  kiln_status status = create_local(indices.data(), int64_t(indices.size()), raw.data(), reason, sizeof reason);
  if (status != KILN_OK) fail(status, "cannot create communicators over local GPUs: " + one_line(reason));
  std::vector<std::shared_ptr<Collective>> comms;
  for (Collective *c : raw) comms.emplace_back(c);
  ctx.log(KILN_LOG_INFO, "communicators: " + comms.front()->describe());
  return comms;
}

}  // namespace kiln
