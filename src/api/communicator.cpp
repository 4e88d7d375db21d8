// Communicators and DDP: argument checks here, the logic in src/distributed and
// src/train.
#include <cmath>
#include <vector>

#include "api/handles.hpp"
#include "distributed/communicator.hpp"
#include "train/data_parallel.hpp"

using kiln::api::guard;
using kiln::api::lookup;
using kiln::api::query;
using kiln::api::require;
using kiln::api::value;

KILN_API kiln_status kiln_communicator_create_mpi(kiln_context *ctx, kiln_communicator **out) {
  return guard([&] {
    std::shared_ptr<kiln::Context> c = value(ctx, "context");
    require(out, "out");
    std::shared_ptr<kiln::Collective> comm = kiln::create_mpi_communicator(*c);
    *out = kiln::api::make_handle<kiln_communicator>(std::move(comm));
  }, out);
}

KILN_API kiln_status kiln_communicator_create_local(kiln_context *ctx, const kiln_device *devices, int64_t count,
                                                    kiln_communicator **out) {
  // out[] is cleared only for a count that can be right: a wrong one says
  // nothing about the caller's array.
  const bool count_ok = count >= 1 && count <= KILN_MAX_DATA_PARALLEL_DEVICES;
  if (out && count_ok)
    for (int64_t i = 0; i < count; ++i) out[i] = nullptr;
  return guard([&] {
    kiln::check(count_ok, KILN_ERROR_INVALID_ARGUMENT,
                "count must be in [1, " + std::to_string(KILN_MAX_DATA_PARALLEL_DEVICES) + "], got " +
                    std::to_string(count));
    std::shared_ptr<kiln::Context> c = value(ctx, "context");
    require(devices, "devices");
    require(out, "out");
    std::vector<kiln::Device> list;
    for (int64_t i = 0; i < count; ++i) list.push_back(kiln::api::device(devices[i]));
    std::vector<std::shared_ptr<kiln::Collective>> comms = kiln::create_local_communicators(*c, list);
    // Handles last, all at once: nothing after can fail.
    for (int64_t i = 0; i < count; ++i) out[i] = kiln::api::make_handle<kiln_communicator>(comms[size_t(i)]);
  });
}

KILN_API void kiln_communicator_release(kiln_communicator *comm) { kiln::api::release_handle(comm); }

KILN_API kiln_status kiln_communicator_retain(kiln_communicator *comm, kiln_communicator **out) {
  return kiln::api::retain_handle(comm, "comm", out);
}

KILN_API kiln_status kiln_communicator_rank(const kiln_communicator *comm, int64_t *out) {
  return query(comm, "communicator", out, [](const auto &c) { return c->rank(); });
}

KILN_API kiln_status kiln_communicator_size(const kiln_communicator *comm, int64_t *out) {
  return query(comm, "communicator", out, [](const auto &c) { return c->size(); });
}

KILN_API kiln_status kiln_communicator_local_rank(const kiln_communicator *comm, int64_t *out) {
  return query(comm, "communicator", out, [](const auto &c) { return c->local_rank(); });
}

KILN_API kiln_status kiln_communicator_set_timeout(kiln_communicator *comm, double seconds) {
  return guard([&] {
    std::shared_ptr<kiln::Collective> c = value(comm, "communicator");
    kiln::check(std::isfinite(seconds) && seconds > 0, KILN_ERROR_INVALID_ARGUMENT,
                "the timeout must be a number of seconds > 0, got " + std::to_string(seconds));
    c->set_timeout(seconds);
  });
}

KILN_API kiln_status kiln_trainer_attach_communicator(kiln_trainer *trainer, kiln_communicator *comm) {
  return guard([&] {
    kiln::DataParallel &t = *lookup(trainer, "trainer")->value;
    std::shared_ptr<kiln::Collective> c = value(comm, "communicator");
    t.attach(std::move(c));
  });
}
