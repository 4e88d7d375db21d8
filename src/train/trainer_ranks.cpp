// The trainer as one rank of data-parallel training (see trainer.hpp):
// attaching to a communicator, and the collectives of a pass.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/excerpt.hpp"
#include "train/trainer.hpp"

namespace kiln {

namespace {

// FNV-1a, 64 bits: enough to tell two settings apart, not a security measure.
uint64_t fnv1a(const std::string &text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Everything every rank of a data-parallel run must agree on to compute the
// same update: the model and the options that shape a step, each as exact text.
std::vector<std::pair<std::string, std::string>> agreement(const Model &m, const TrainerOptions &o) {
  std::vector<std::pair<std::string, std::string>> items{{"model", m.description() + " " + dtype_name(m.dtype())}};
  for (auto &item : agreed_options(o)) items.push_back(std::move(item));
  return items;
}

}  // namespace

void Trainer::reduce_stats(PassStats &stats) const {
  static_assert(sizeof(PassStats) == 3 * sizeof(double), "PassStats is three doubles");
  if (comm_) comm_->allreduce(Device::cpu(), DType::F64, &stats, 3, false);
}

void Trainer::check_same_size(const Dataset &ds, const char *what) const {
  if (!comm_) return;
  // Ranks with datasets of different sizes would run different numbers of
  // steps and pair one rank's allreduce with another's next one.
  const int64_t mine = ds.size();
  std::vector<int64_t> all(size_t(comm_->size()));
  comm_->allgather(&mine, sizeof mine, all.data());
  for (size_t r = 1; r < all.size(); ++r)
    check(all[r] == all[0], KILN_ERROR_INVALID_ARGUMENT,
          std::string(what) + " has " + std::to_string(all[r]) + " samples on rank " + std::to_string(r) + " but " +
              std::to_string(all[0]) + " on rank 0: every rank must pass the same dataset");
}

void Trainer::attach(std::shared_ptr<Collective> comm) {
  check_model_device();
  check(comm != nullptr, KILN_ERROR_INVALID_ARGUMENT, "communicator is null");
  check(comm->supports(device_), KILN_ERROR_NOT_SUPPORTED,
        "the communicator (" + comm->describe() + ") cannot reduce buffers on " + device_.str());
  // Compare before exchanging anything else, so a mismatch is reported as
  // such and not as a broadcast of the wrong size. One hash per item, so the
  // message can name what differs.
  const auto items = agreement(*model_, options_);
  std::vector<uint64_t> mine;
  for (const auto &item : items) mine.push_back(fnv1a(item.second));
  const size_t n = mine.size();
  std::vector<uint64_t> all(size_t(comm->size()) * n);
  comm->allgather(mine.data(), int64_t(n * sizeof(uint64_t)), all.data());
  const size_t ranks = size_t(comm->size());
  std::string differing_ranks, what, here;
  for (size_t r = 1; r < ranks; ++r)
    if (!std::equal(all.begin() + long(r * n), all.begin() + long((r + 1) * n), all.begin()))
      differing_ranks += (differing_ranks.empty() ? "" : ", ") + std::to_string(r);
  for (size_t i = 0; i < n; ++i) {
    bool differs = false;
    for (size_t r = 1; r < ranks; ++r) differs = differs || all[r * n + i] != all[i];
    if (!differs) continue;
    what += (what.empty() ? "" : ", ") + items[i].first;
    here += (here.empty() ? "" : ", ") + items[i].first + " " + items[i].second;
  }
  check(what.empty(), KILN_ERROR_INVALID_ARGUMENT,
        "the model or trainer options of rank(s) " + differing_ranks + " differ from rank 0's in: " + what +
            " (this rank has " + excerpt(here, 300) + ")");

  // Rank 0's weights, optimizer state and counters, so every rank starts
  // from the same point (a rank that resumed a checkpoint, or seeded its
  // context differently, included).
  broadcast_parameters(*comm);
  for (const auto &state : optimizer_.state())
    comm->broadcast(device_, state.second.data(), state.second.numel() * dtype_size(state.second.dtype()), 0);
  int64_t counters[5] = {int64_t(rng_seed_), int64_t(rng_counter_), steps_done_, epochs_done_, optimizer_.steps()};
  comm->broadcast(Device::cpu(), counters, sizeof counters, 0);
  rng_seed_ = uint64_t(counters[0]), rng_counter_ = uint64_t(counters[1]);
  steps_done_ = counters[2], epochs_done_ = counters[3];
  optimizer_.set_steps(counters[4]);
  shards_ = ShardPlan{comm->rank(), comm->size()};
  comm_ = std::move(comm);
  shard_n_ = -1;
  window_valid_ = false;
}

void Trainer::broadcast_parameters(Collective &comm) {
  const Tensor &params = model_->flat();
  if (!device_.is_cpu()) params.backend().synchronize(device_.index);
  comm.broadcast(device_, params.data(), params.numel() * dtype_size(params.dtype()), 0);
  params.note_written();
}

}  // namespace kiln
