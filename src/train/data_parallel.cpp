#include "train/data_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "distributed/communicator.hpp"

namespace kiln {

namespace {
constexpr std::chrono::seconds kFailureGrace{2};
}  // namespace

// One thread per replica 1..N-1, kept for the trainer's life: a caller's
// step is tens of microseconds on a GPU, too short to start threads for.
class DataParallel::Workers {
 public:
  explicit Workers(int64_t replicas) {
    for (int64_t r = 1; r < replicas; ++r) threads_.emplace_back([this, r] { loop(r); });
  }

  ~Workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread &t : threads_) t.join();
  }

  // Starts task(r) on every worker; errors[r] receives what it throws.
  void start(const ReplicaTask &task, std::vector<std::exception_ptr> &errors) {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &task;
    errors_ = &errors;
    pending_ = int64_t(threads_.size());
    ++generation_;
    wake_.notify_all();
  }

  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  void loop(int64_t r) {
    uint64_t seen = 0;
    for (;;) {
      const ReplicaTask *task;
      std::vector<std::exception_ptr> *errors;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        task = task_, errors = errors_;
      }
      try {
        (*task)(r);
      } catch (...) {
        (*errors)[size_t(r)] = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const ReplicaTask *task_ = nullptr;
  std::vector<std::exception_ptr> *errors_ = nullptr;
  int64_t pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

namespace {

// Hands the caller's progress-callback answers to the other replicas. Every
// replica reports at the same points (same options, same steps), so report
// k of replica r > 0 returns what the callback returned at replica 0's
// report k: a cancel stops every replica at the same step. When replica 0's
// call ends without that report (it failed), the others are told to cancel.
class ProgressRelay {
 public:
  ProgressRelay(kiln_progress_fn callback, void *user, int64_t replicas)
      : callback_(callback), user_(user), seen_(size_t(replicas), 0) {}

  struct Rank {
    ProgressRelay *relay;
    int64_t r;
  };

  static int report(void *self, const kiln_progress *p) {
    Rank &rank = *static_cast<Rank *>(self);
    return rank.r == 0 ? rank.relay->ask(p) : rank.relay->follow(rank.r);
  }

  // Replica 0's call is over: later reports of the others cancel.
  void root_done() {
    std::lock_guard<std::mutex> lock(mutex_);
    root_done_ = true;
    answered_.notify_all();
  }

 private:
  int ask(const kiln_progress *p) {
    const int answer = callback_(user_, p);
    std::lock_guard<std::mutex> lock(mutex_);
    answers_.push_back(answer);
    answered_.notify_all();
    return answer;
  }

  int follow(int64_t r) {
    std::unique_lock<std::mutex> lock(mutex_);
    size_t &k = seen_[size_t(r)];
    answered_.wait(lock, [&] { return answers_.size() > k || root_done_; });
    return k < answers_.size() ? answers_[k++] : 1;
  }

  kiln_progress_fn callback_;
  void *user_;
  std::mutex mutex_;
  std::condition_variable answered_;
  std::vector<int> answers_;
  std::vector<size_t> seen_;  // per replica: reports answered
  bool root_done_ = false;
};

}  // namespace

DataParallel::DataParallel(std::shared_ptr<Model> model, TrainerOptions options,
                           const CommunicatorFactory &make_communicators) {
  check(model != nullptr, KILN_ERROR_INVALID_ARGUMENT, "model is null");
  loss_ = options.loss;
  devices_ = std::move(options.devices);
  options.devices.clear();
  const std::vector<Device> &devices = devices_;
  const int64_t n = int64_t(devices.size());
  if (n <= 1) {
    check(n == 0 || devices[0] == model->device(), KILN_ERROR_INVALID_ARGUMENT,
          "the trainer's device list names " + (n ? devices[0].str() : std::string()) + " but the model is on " +
              model->device().str() + "; move the model there first (kiln_model_to)");
    models_.push_back(model);
    replicas_.push_back(std::make_unique<Trainer>(std::move(model), options));
    return;
  }
  check(model->device() == devices[0], KILN_ERROR_INVALID_ARGUMENT,
        "DataParallel keeps the model on the first listed device, " + devices[0].str() + ", but it is on " +
            model->device().str() + "; move it there first (kiln_model_to)");
  const std::shared_ptr<Context> &ctx = model->context();
  comms_ = make_communicators ? make_communicators(*ctx, devices) : create_local_communicators(*ctx, devices);
  check(int64_t(comms_.size()) == n, KILN_ERROR_INTERNAL, "communicator factory made the wrong number of ranks");
  models_.push_back(model);
  for (int64_t r = 1; r < n; ++r) models_.push_back(Model::create(ctx, model->spec(), devices[size_t(r)], model->dtype()));
  for (int64_t r = 0; r < n; ++r) replicas_.push_back(std::make_unique<Trainer>(models_[size_t(r)], options));
  errors_.resize(size_t(n));
  done_.resize(size_t(n));
  losses_.resize(size_t(n));
  workers_ = std::make_unique<Workers>(n);
  // attach hands every replica replica 0's weights, optimizer state and counters.
  run_all([&](int64_t r) { replicas_[size_t(r)]->attach(comms_[size_t(r)]); }, false);
}

DataParallel::~DataParallel() = default;

void DataParallel::run_all(ReplicaTask task, bool sync_parameters) {
  const size_t n = replicas_.size();
  // What replica 0 alone could fail on is checked here, before the others
  // start: abort() below breaks the group for good.
  KILN_CHECK(models_[0]->device() == devices_[0], KILN_ERROR_INVALID_ARGUMENT,
             "model moved to " + models_[0]->device().str() + " after the trainer was created on " +
                 devices_[0].str() + "; create a new trainer");
  for (size_t r = 1; r < n; ++r) models_[r]->set_training(models_[0]->training());
  std::fill(errors_.begin(), errors_.end(), nullptr);
  std::fill(done_.begin(), done_.end(), char(0));
  // A replica that fails while others go on (out of memory on its GPU alone,
  // a device fault) would leave them waiting for it in their next
  // collective until the timeout. So a failing replica gives the others
  // kFailureGrace to finish (they usually fail at the same point: the same
  // arguments, the same cancel), then aborts the communicators of those
  // still running; the group's communicators are broken from then on.
  const auto guarded = [&](int64_t r) {
    const auto finish = [&] {
      std::lock_guard<std::mutex> lock(done_mutex_);
      done_[size_t(r)] = 1;
      finished_.notify_all();
    };
    try {
      if (sync_parameters) replicas_[size_t(r)]->broadcast_parameters(*comms_[size_t(r)]);
      task(r);
    } catch (const std::exception &e) {
      finish();
      std::unique_lock<std::mutex> lock(done_mutex_);
      const auto all_done = [&] { return std::find(done_.begin(), done_.end(), char(0)) == done_.end(); };
      if (!finished_.wait_for(lock, kFailureGrace, all_done))
        for (size_t o = 0; o < n; ++o)
          if (!done_[o])
            comms_[o]->abort("replica " + std::to_string(r) + " of the DataParallel group failed: " + e.what());
      throw;
    }
    finish();
  };
  const ReplicaTask work(guarded);  // named: the workers hold a pointer to it until wait()
  workers_->start(work, errors_);
  try {
    guarded(0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }
  workers_->wait();
  for (const std::exception_ptr &e : errors_)
    if (e) std::rethrow_exception(e);
}

double DataParallel::step(const Tensor &x, const Tensor &y, bool want_loss) {
  BusyScope busy(busy_, "kiln_trainer_step");
  const int64_t n = devices();
  if (n == 1) return replicas_[0]->step(x, y, want_loss);
  // KILN_CHECK: a step builds no message (and allocates nothing) when the
  // batch is fine.
  KILN_CHECK(x.defined() && y.defined(), KILN_ERROR_INVALID_ARGUMENT, "x and y must be defined");
  const int64_t rows = x.ndim() >= 1 ? x.dim(0) : 0;
  KILN_CHECK(y.ndim() >= 1 && y.dim(0) == rows, KILN_ERROR_SHAPE_MISMATCH,
             "y has shape " + y.shape().str() + " but x has " + std::to_string(rows) + " rows");
  KILN_CHECK(rows >= n && rows % n == 0, KILN_ERROR_INVALID_ARGUMENT,
             "a step's batch of " + std::to_string(rows) + " rows does not split evenly over " + std::to_string(n) +
                 " devices; pass a multiple of " + std::to_string(n) + " rows");
  // Each replica checks host labels of its own chunk only: check them all
  // first, so bad labels fail every replica or none.
  const bool labels = y.dtype() == DType::I64 || y.dtype() == DType::I32 || y.dtype() == DType::U8;
  if (loss_ == KILN_LOSS_CROSS_ENTROPY && labels && y.device().is_cpu()) check_host_labels(y, models_[0]->output_size());
  const int64_t chunk = rows / n;
  run_all([&](int64_t r) {
    const int64_t first = r * chunk, end = first + chunk;
    losses_[size_t(r)] = replicas_[size_t(r)]->step(x.rows(first, end), y.rows(first, end), want_loss);
  });
  double sum = 0;
  for (double l : losses_) sum += l;
  return want_loss ? sum / double(n) : 0;
}

kiln_epoch_stats DataParallel::epoch(const Dataset &dataset) {
  BusyScope busy(busy_, "kiln_trainer_epoch");
  if (devices() == 1) return replicas_[0]->epoch(dataset);
  kiln_epoch_stats s{};
  run_all([&](int64_t r) {
    const kiln_epoch_stats mine = replicas_[size_t(r)]->epoch(dataset);
    if (r == 0) s = mine;
  });
  return s;
}

std::shared_ptr<History> DataParallel::fit(const Dataset &train, const Dataset *validation, int64_t epochs,
                                           kiln_progress_fn callback, void *user) {
  BusyScope busy(busy_, "kiln_trainer_fit");
  const int64_t n = devices();
  if (n == 1) return replicas_[0]->fit(train, validation, epochs, callback, user);
  ProgressRelay relay(callback, user, n);
  std::vector<ProgressRelay::Rank> ranks;
  for (int64_t r = 0; r < n; ++r) ranks.push_back({&relay, r});
  std::shared_ptr<History> history;
  run_all([&](int64_t r) {
    Trainer &t = *replicas_[size_t(r)];
    struct RootDone {
      ProgressRelay &relay;
      bool root;
      ~RootDone() {
        if (root) relay.root_done();
      }
    } done{relay, r == 0};
    std::shared_ptr<History> h =
        t.fit(train, validation, epochs, callback ? ProgressRelay::report : nullptr, &ranks[size_t(r)]);
    if (r == 0) history = std::move(h);
  });
  return history;
}

void DataParallel::evaluate(const Dataset &dataset, double *loss, double *accuracy) {
  BusyScope busy(busy_, "kiln_trainer_evaluate");
  if (devices() == 1) return replicas_[0]->evaluate(dataset, loss, accuracy);
  run_all([&](int64_t r) {
    double l = 0, a = 0;
    replicas_[size_t(r)]->evaluate(dataset, &l, &a);
    if (r == 0) *loss = l, *accuracy = a;
  });
}

void DataParallel::save_checkpoint(const std::string &path) const {
  // The replicas hold the same state, so replica 0 alone writes; that needs
  // no other replica, and so works from inside the progress callback too.
  if (devices() == 1) return replicas_[0]->save_checkpoint(path);
  replicas_[0]->write_checkpoint(path);
}

void DataParallel::load_checkpoint(const std::string &path) {
  BusyScope busy(busy_, "kiln_trainer_load_checkpoint");
  if (devices() == 1) return replicas_[0]->load_checkpoint(path);
  run_all([&](int64_t r) { replicas_[size_t(r)]->load_checkpoint(path); }, false);
}

void DataParallel::attach(std::shared_ptr<Collective> comm) {
  // From the progress callback, the running pass would go on with another
  // communicator, and the weights broadcast under its feet.
  BusyScope busy(busy_, "kiln_trainer_attach_communicator");
  check(devices() == 1, KILN_ERROR_NOT_SUPPORTED,
        "this trainer is DataParallel over " + std::to_string(devices()) +
            " devices; distributed training runs one device per rank (one trainer per process or GPU)");
  replicas_[0]->attach(std::move(comm));
}

}  // namespace kiln
