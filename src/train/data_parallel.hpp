// DataParallel: what a kiln_trainer is. A trainer over one device, or over
// several GPUs of one process as PyTorch's nn.DataParallel (the options'
// device list).
//
// With one device it is a Trainer and nothing more: every call goes straight
// to it. With N devices it holds N replicas, replica r a model on devices[r]
// (replica 0 the caller's model, which must already be there) and a Trainer
// with the same options attached as rank r to a communicator over the N
// devices (NCCL alone: create_local_communicators). Each replica is driven by
// a thread of its own (replica 0 by the calling thread), so the ranks meet in
// every collective as the processes of DDP do. Everything DDP guarantees then
// holds, the meaning of the batch size included: replica r trains on
// positions r, r + N, ... of each epoch's shuffled order with batch B (the
// options' batch size, per device as per rank), gradients are averaged every
// step, metrics reduced, and batch B on each of N GPUs trains like batch N*B
// on one. A caller's step splits its batch into N contiguous chunks.
//
// The replicas take the model's parameters (and training flag) at the start
// of every call, so changes made to the model between calls reach them, as
// nn.DataParallel replicates the module on every forward. The progress
// callback runs on the calling thread only, and its answer (go on or cancel)
// is handed to every replica at the same report, so a cancel stops them all.
//
// Used by one thread at a time; a call from inside the progress callback
// gets KILN_ERROR_BUSY.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "train/trainer.hpp"

namespace kiln {

// Makes one communicator per device, rank i on devices[i].
using CommunicatorFactory =
    std::function<std::vector<std::shared_ptr<Collective>>(const Context &, const std::vector<Device> &)>;

class DataParallel {
 public:
  // options.devices empty or one device: a plain trainer on the model's
  // device (INVALID_ARGUMENT when the one listed is not the model's). More:
  // INVALID_ARGUMENT unless the model is on devices[0]; then whatever
  // make_communicators throws (the default, create_local_communicators:
  // INVALID_ARGUMENT for a CPU or a repeated device, DEVICE_UNAVAILABLE,
  // NOT_SUPPORTED without NCCL).
  DataParallel(std::shared_ptr<Model> model, TrainerOptions options,
               const CommunicatorFactory &make_communicators = nullptr);
  ~DataParallel();
  DataParallel(const DataParallel &) = delete;
  DataParallel &operator=(const DataParallel &) = delete;

  // As Trainer's; step's x and y are split in N chunks (INVALID_ARGUMENT
  // unless their rows divide evenly), its loss is the whole batch's.
  double step(const Tensor &x, const Tensor &y, bool want_loss);
  kiln_epoch_stats epoch(const Dataset &dataset);
  std::shared_ptr<History> fit(const Dataset &train, const Dataset *validation, int64_t epochs,
                               kiln_progress_fn callback, void *user);
  void evaluate(const Dataset &dataset, double *loss, double *accuracy);
  void save_checkpoint(const std::string &path) const;
  void load_checkpoint(const std::string &path);
  // DDP over processes: one device only (NOT_SUPPORTED otherwise).
  void attach(std::shared_ptr<Collective> comm);

  int64_t devices() const { return int64_t(replicas_.size()); }
  int64_t epochs_done() const { return replicas_[0]->epochs_done(); }
  int64_t steps_done() const { return replicas_[0]->steps_done(); }
  double current_lr() const { return replicas_[0]->current_lr(); }

 private:
  class Workers;

  // A reference to a callable taking a replica's index, not owning it: the
  // tasks live on run_all's caller's stack for the whole call, and a
  // std::function around them would allocate on every step.
  class ReplicaTask {
   public:
    template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, ReplicaTask>>>
    ReplicaTask(F &&f)  // NOLINT: implicit, so run_all takes a lambda
        : object_(const_cast<void *>(static_cast<const void *>(&f))),
          call_([](void *o, int64_t r) { (*static_cast<std::remove_reference_t<F> *>(o))(r); }) {}
    void operator()(int64_t r) const { call_(object_, r); }

   private:
    void *object_;
    void (*call_)(void *, int64_t);
  };

  // Runs task(r) for every replica r, r = 0 on the calling thread, after
  // handing the replicas replica 0's training flag and, when
  // sync_parameters, its parameters; throws replica 0's error if it
  // failed, else the first failing replica's.
  void run_all(ReplicaTask task, bool sync_parameters = true);

  kiln_loss_kind loss_;
  std::vector<Device> devices_;  // empty: the model's device
  std::vector<std::shared_ptr<Model>> models_;
  std::vector<std::shared_ptr<Collective>> comms_;  // replica r's is comms_[r]
  std::vector<std::unique_ptr<Trainer>> replicas_;
  std::unique_ptr<Workers> workers_;  // null with one device
  // run_all's per-call state, sized once: a step allocates nothing.
  std::vector<std::exception_ptr> errors_;
  std::vector<char> done_;  // replica r finished its task (guarded by done_mutex_)
  std::mutex done_mutex_;
  std::condition_variable finished_;
  std::vector<double> losses_;  // step's, per replica
  bool busy_ = false;
};

}  // namespace kiln
