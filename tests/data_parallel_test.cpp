// DataParallel's orchestration on a machine without GPUs: replicas on the CPU
// joined by an in-process test collective (ThreadCollective in
// thread_collective.hpp, a test double standing in for NCCL's communicators over local GPUs), checked
// against one Trainer with the whole batch. What is checked here is kiln's
// part: the split of batches and epochs, the threads, the parameter sync,
// the relay of the progress callback, and failures; the NCCL engine itself
// needs GPUs (test_data_parallel_cuda).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

#include "backend_harness.hpp"
#include "nn/model.hpp"
#include "thread_collective.hpp"
#include "train/data_parallel.hpp"

namespace kiln {
namespace {

using test::status_of;

// A factory of n thread ranks over a fresh hub; *hub_out sees the hub.
CommunicatorFactory threads_factory(std::shared_ptr<Hub> *hub_out = nullptr, int64_t fail_rank = -1,
                                    int64_t fail_at = 0) {
  return [=](const Context &, const std::vector<Device> &devices) {
    auto hub = std::make_shared<Hub>(int64_t(devices.size()));
    hub->fail_rank = fail_rank, hub->fail_at = fail_at;
    if (hub_out) *hub_out = hub;
    std::vector<std::shared_ptr<Collective>> comms;
    for (int64_t r = 0; r < int64_t(devices.size()); ++r) comms.push_back(std::make_shared<ThreadCollective>(hub, r));
    return comms;
  };
}

constexpr int64_t kIn = 12, kClasses = 4, kSamples = 96;
// Replicas and one trainer with the whole batch sum gradients in other
// orders: over 5 steps and an epoch the weights (|w| < 0.3) differ by at
// most 6e-8, over 3 more epochs of fit by 4.5e-8 from where they started
// (measured); a gradient element left out of the mean moves its weight by
// lr * O(0.1).
constexpr double kRtol = 1e-5, kAtol = 1e-7, kFitAtol = 2e-7;

std::shared_ptr<Model> make_model(const std::shared_ptr<Context> &ctx, const char *layers = "12-16-4") {
  ModelSpec spec;
  spec.parse(layers);
  return Model::create(ctx, spec, Device::cpu(), DType::F32);
}

// A copy of m's parameters in a new model.
std::shared_ptr<Model> twin(const std::shared_ptr<Model> &m) {
  std::shared_ptr<Model> t = make_model(m->context());
  t->flat().copy_from(m->flat());
  return t;
}

std::vector<float> host(const Tensor &t) {
  std::vector<float> v(size_t(t.numel()));
  t.copy_to_host(v.data(), t.nbytes());
  return v;
}

// The largest of |a_i - b_i| / (rtol |b_i| + atol) over the parameters: at
// most 1 when every one is within its tolerance. Per element, so an error in
// a small weight is not hidden by a large one (make_data's features are
// non-zero, so every weight has a gradient to get wrong).
double excess(const Model &a, const Model &b, double rtol, double atol) {
  const std::vector<float> x = host(a.flat()), y = host(b.flat());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::fabs(double(x[i]) - double(y[i])) / (rtol * std::fabs(double(y[i])) + atol));
  return worst;
}

// Separable-ish synthetic classes: x ~ U(-1, 1), label from the sign pattern.
void make_data(const std::shared_ptr<Context> &ctx, int64_t rows, uint32_t seed, Tensor *x, Tensor *y) {
  std::vector<float> xs(size_t(rows * kIn));
  std::vector<int64_t> ys(static_cast<size_t>(rows));
  uint32_t s = seed;
  for (float &v : xs) {
    s = s * 1664525u + 1013904223u;
    v = float(s >> 8) / float(1 << 24) * 2.0f - 1.0f;
  }
  for (int64_t i = 0; i < rows; ++i)
    ys[size_t(i)] = (xs[size_t(i * kIn)] > 0 ? 1 : 0) + (xs[size_t(i * kIn + 1)] > 0 ? 2 : 0);
  *x = Tensor::from_host(ctx, xs.data(), int64_t(xs.size() * sizeof(float)), Shape{rows, kIn}, DType::F32, Device::cpu());
  *y = Tensor::from_host(ctx, ys.data(), int64_t(ys.size() * sizeof(int64_t)), Shape{rows}, DType::I64, Device::cpu());
}

TrainerOptions options_for(int64_t batch) {
  TrainerOptions o;
  o.lr = 0.05;
  o.optimizer = KILN_OPTIM_SGD;
  o.momentum = 0.9;
  o.batch_size = batch;
  set_option(o, Option::shuffle_seed, uint64_t(7));
  return o;
}

TrainerOptions dp_options(int64_t batch, int64_t replicas) {
  TrainerOptions o = options_for(batch);
  o.devices.assign(size_t(replicas), Device::cpu());
  return o;
}

// N replicas with batch B / N each (the batch size is per device, as per rank
// in DDP) train as one trainer with batch B: caller steps, epochs,
// evaluation and fit with validation.
void same_as_one_trainer(const std::shared_ptr<Context> &ctx, int64_t replicas) {
  test::g_case = "same as one trainer, " + std::to_string(replicas) + " replicas";
  std::shared_ptr<Model> dp_model = make_model(ctx), ref_model = twin(dp_model);
  DataParallel dp(dp_model, dp_options(24 / replicas, replicas), threads_factory());
  Trainer ref(ref_model, options_for(24));
  CHECK(dp.devices() == replicas);

  for (uint32_t i = 0; i < 5; ++i) {
    Tensor x, y;
    make_data(ctx, 24, 100 + i, &x, &y);
    const double a = dp.step(x, y, true), b = ref.step(x, y, true);
    CHECK(std::fabs(a - b) <= 1e-6 * std::fabs(b));
  }
  CHECK(excess(*dp_model, *ref_model, kRtol, kAtol) <= 1);
  CHECK(dp.steps_done() == 5);

  Tensor x, y, vx, vy;
  make_data(ctx, kSamples, 1, &x, &y);
  make_data(ctx, kSamples, 2, &vx, &vy);
  std::shared_ptr<Dataset> train = Dataset::from_tensors(x, y), val = Dataset::from_tensors(vx, vy);
  const kiln_epoch_stats s = dp.epoch(*train), r = ref.epoch(*train);
  CHECK(std::fabs(s.train_loss - r.train_loss) <= 1e-5 * r.train_loss);
  CHECK(std::fabs(s.train_accuracy - r.train_accuracy) <= 1e-12);
  CHECK(excess(*dp_model, *ref_model, kRtol, kAtol) <= 1);
  CHECK(dp.epochs_done() == 1 && dp.steps_done() == ref.steps_done());

  double dl = 0, da = 0, rl = 0, ra = 0;
  dp.evaluate(*val, &dl, &da);
  ref.evaluate(*val, &rl, &ra);
  CHECK(std::fabs(dl - rl) <= 1e-5 * rl);
  CHECK(std::fabs(da - ra) <= 1e-12);

  std::shared_ptr<History> dh = dp.fit(*train, val.get(), 3, nullptr, nullptr);
  std::shared_ptr<History> rh = ref.fit(*train, val.get(), 3, nullptr, nullptr);
  CHECK(dh->epochs.size() == 3 && rh->epochs.size() == 3);
  for (size_t e = 0; e < dh->epochs.size() && e < rh->epochs.size(); ++e) {
    CHECK(std::fabs(dh->epochs[e].train_loss - rh->epochs[e].train_loss) <= 1e-4 * rh->epochs[e].train_loss);
    CHECK(std::fabs(dh->epochs[e].val_loss - rh->epochs[e].val_loss) <= 1e-4 * rh->epochs[e].val_loss);
  }
  CHECK(excess(*dp_model, *ref_model, kRtol, kFitAtol) <= 1);

  // A change to the model between calls reaches every replica: set the
  // weights on both sides, then a step must agree again.
  ref_model->flat().copy_from(dp_model->flat());
  Tensor bx, by;
  make_data(ctx, 24, 55, &bx, &by);
  const std::vector<float> before = host(dp_model->flat());
  std::vector<float> changed = before;
  for (float &v : changed) v *= 0.5f;
  dp_model->flat().copy_from_host(changed.data(), int64_t(changed.size() * sizeof(float)));
  ref_model->flat().copy_from_host(changed.data(), int64_t(changed.size() * sizeof(float)));
  dp.step(bx, by, false);
  ref.step(bx, by, false);
  CHECK(excess(*dp_model, *ref_model, kRtol, kAtol) <= 1);
}

struct Reports {
  std::thread::id caller;
  int64_t calls = 0, cancel_at = 0;
  bool off_thread = false;
  DataParallel *dp = nullptr;  // when set: call epoch from inside, expecting BUSY
  const Dataset *data = nullptr;
  kiln_status nested = KILN_OK;
};

int on_progress(void *user, const kiln_progress *) {
  Reports &r = *static_cast<Reports *>(user);
  if (std::this_thread::get_id() != r.caller) r.off_thread = true;
  if (r.dp) r.nested = status_of([&] { r.dp->epoch(*r.data); });
  return ++r.calls == r.cancel_at ? 1 : 0;
}

// The callback runs on the calling thread only; its cancel stops every
// replica at the same step, so the group stays usable and in step with a
// single trainer cancelled at the same report; a nested call is BUSY.
void progress_and_cancel(const std::shared_ptr<Context> &ctx) {
  test::g_case = "progress and cancel";
  std::shared_ptr<Model> dp_model = make_model(ctx), ref_model = twin(dp_model);
  TrainerOptions o = dp_options(8, 2), r = options_for(16);
  o.progress_interval = r.progress_interval = 2;
  DataParallel dp(dp_model, o, threads_factory());
  Trainer ref(ref_model, r);
  Tensor x, y;
  make_data(ctx, kSamples, 3, &x, &y);
  std::shared_ptr<Dataset> train = Dataset::from_tensors(x, y);

  Reports dr, rr;
  dr.caller = rr.caller = std::this_thread::get_id();
  dr.cancel_at = rr.cancel_at = 4;  // batch reports at 2 and 4 batches of 6, an epoch report, then a batch report
  dr.dp = &dp, dr.data = train.get();
  std::string message;
  CHECK(status_of([&] { dp.fit(*train, nullptr, 3, on_progress, &dr); }, &message) == KILN_ERROR_CANCELLED);
  CHECK(status_of([&] { ref.fit(*train, nullptr, 3, on_progress, &rr); }) == KILN_ERROR_CANCELLED);
  CHECK(dr.calls == 4 && !dr.off_thread);
  CHECK(dr.nested == KILN_ERROR_BUSY);
  CHECK(dp.steps_done() == ref.steps_done());
  CHECK(excess(*dp_model, *ref_model, kRtol, kAtol) <= 1);
  // Still usable, and the replicas still agree with the reference.
  dp.epoch(*train);
  ref.epoch(*train);
  CHECK(excess(*dp_model, *ref_model, kRtol, kAtol) <= 1);
}

void bad_input(const std::shared_ptr<Context> &ctx) {
  test::g_case = "bad input";
  std::shared_ptr<Model> m = make_model(ctx);
  // Any batch size is one: it is per device (9 each, 18 per step). The model
  // must be on the first device.
  CHECK(status_of([&] { DataParallel(m, dp_options(9, 2), threads_factory()); }) == KILN_OK);
  TrainerOptions gpus = options_for(8);
  gpus.devices = {Device::cuda(0), Device::cuda(1)};
  std::string message;
  CHECK(status_of([&] { DataParallel(m, gpus, threads_factory()); }, &message) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(message.find("first listed device") != std::string::npos);
  TrainerOptions one = options_for(8);
  one.devices = {Device::cuda(0)};
  CHECK(status_of([&] { DataParallel(m, one); }) == KILN_ERROR_INVALID_ARGUMENT);
  // Without the test factory: local communicators refuse the CPU.
  CHECK(status_of([&] { DataParallel(m, dp_options(8, 2)); }) == KILN_ERROR_INVALID_ARGUMENT);

  DataParallel dp(m, dp_options(8, 2), threads_factory());
  Tensor x, y;
  make_data(ctx, 7, 4, &x, &y);
  CHECK(status_of([&] { dp.step(x, y, true); }, &message) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(message.find("split evenly") != std::string::npos);
  make_data(ctx, 8, 4, &x, &y);
  Tensor y6 = y.rows(0, 6);
  CHECK(status_of([&] { dp.step(x, y6, true); }) == KILN_ERROR_SHAPE_MISMATCH);
  // A bad label in the second chunk fails every replica before any runs.
  std::vector<int64_t> labels(8, 1);
  labels[6] = 9;
  Tensor bad = Tensor::from_host(ctx, labels.data(), 8 * 8, Shape{8}, DType::I64, Device::cpu());
  CHECK(status_of([&] { dp.step(x, bad, true); }, &message) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(message.find("label 9") != std::string::npos);
  CHECK(dp.steps_done() == 0);
  CHECK(status_of([&] { dp.step(x, y, true); }) == KILN_OK);  // still usable
  CHECK(status_of([&] { dp.attach(nullptr); }) == KILN_ERROR_NOT_SUPPORTED);
}

// A replica failing alone makes the others fail within the grace period, not
// the collective's timeout (60 s here).
void replica_fails_alone(const std::shared_ptr<Context> &ctx) {
  test::g_case = "replica fails alone";
  std::shared_ptr<Model> m = make_model(ctx);
  // Rank 1's 8th collective fails: past the attach's (fingerprint, weights,
  // optimizer state, counters), within the first steps (a weight broadcast
  // and the gradient allreduce each).
  DataParallel dp(m, dp_options(8, 2), threads_factory(nullptr, 1, 8));
  Tensor x, y;
  make_data(ctx, 8, 5, &x, &y);
  std::string message;
  kiln_status status = KILN_OK;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 4 && status == KILN_OK; ++i) {
    start = std::chrono::steady_clock::now();
    status = status_of([&] { dp.step(x, y, true); }, &message);
  }
  CHECK(status == KILN_ERROR_COMMUNICATION);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 10);
  std::printf("  a lone failure ended the step on every replica in %.2f s: %s\n", seconds, message.c_str());
  // The group is broken for good: later calls fail at once, clearly.
  CHECK(status_of([&] { dp.step(x, y, true); }) == KILN_ERROR_COMMUNICATION);
}

// Gradient buckets (train/gradient_reduce.hpp) change when the allreduces
// start, not what they compute: 12-16-16-4 has layers of 68, 272 and 208
// gradients (272, 1088 and 832 bytes), so 1 byte is a bucket per layer,
// 1000 bytes two (the top two layers, then the first), and 1 MiB one. The
// test collective sums each element in the same order whatever the bucket,
// so every run has the same weights to the bit, in fp32 and in bf16 (whose
// casts to the f32 master gradients are made per bucket).
void buckets_change_nothing(const std::shared_ptr<Context> &ctx, kiln_precision precision) {
  test::g_case = std::string("gradient buckets, ") + (precision == KILN_PRECISION_BF16 ? "bf16" : "fp32");
  Tensor x, y;
  make_data(ctx, kSamples, 1, &x, &y);
  std::shared_ptr<Dataset> train = Dataset::from_tensors(x, y);
  std::shared_ptr<Model> first = make_model(ctx, "12-16-16-4");
  std::vector<float> reference;
  const struct {
    int64_t bytes, buckets;
  } cases[] = {{0, 1}, {1, 3}, {1000, 2}, {1 << 20, 1}};
  for (const auto &c : cases) {
    std::shared_ptr<Model> m = make_model(ctx, "12-16-16-4");
    m->flat().copy_from(first->flat());
    TrainerOptions o = dp_options(12, 2);
    o.precision = precision;
    o.bucket_bytes = c.bytes;
    std::shared_ptr<Hub> hub;
    DataParallel dp(m, o, threads_factory(&hub));
    Tensor bx, by;
    make_data(ctx, 24, 9, &bx, &by);
    const int64_t before = hub->starts;
    dp.step(bx, by, true);
    CHECK(hub->starts - before == 2 * c.buckets);  // per rank
    dp.epoch(*train);
    const std::vector<float> w = host(m->flat());
    if (reference.empty()) reference = w;
    CHECK(w == reference);
  }
  // And one trainer with the whole batch agrees, as without buckets.
  std::shared_ptr<Model> single = make_model(ctx, "12-16-16-4");
  single->flat().copy_from(first->flat());
  TrainerOptions o = options_for(24);
  o.precision = precision;
  o.bucket_bytes = 1;  // no communicator: nothing to bucket
  Trainer ref(single, o);
  Tensor bx, by;
  make_data(ctx, 24, 9, &bx, &by);
  ref.step(bx, by, true);
  ref.epoch(*train);
  const std::vector<float> w = host(single->flat());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < w.size() && i < reference.size(); ++i) {
    diff = std::max(diff, double(std::fabs(w[i] - reference[i])));
    scale = std::max(scale, double(std::fabs(w[i])));
  }
  CHECK(diff <= (precision == KILN_PRECISION_BF16 ? 1e-2 : 1e-5) * scale);
}

std::string file_bytes(const std::string &path) {
  std::FILE *f = std::fopen(path.c_str(), "rb");
  CHECK(f != nullptr);
  std::string bytes;
  if (!f) return bytes;
  char buf[1 << 14];
  for (size_t got; (got = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.append(buf, got);
  std::fclose(f);
  std::remove(path.c_str());
  return bytes;
}

// Fails unless the two ranks' trainers hold the same state to the byte:
// their checkpoints (weights, optimizer state, counters, shuffle seed and
// position) are compared as files.
void check_same_state(const Trainer &a, const Trainer &b, const char *when) {
  a.write_checkpoint("data_parallel_test_rank0.safetensors");
  b.write_checkpoint("data_parallel_test_rank1.safetensors");
  const std::string x = file_bytes("data_parallel_test_rank0.safetensors");
  const std::string y = file_bytes("data_parallel_test_rank1.safetensors");
  test::expect(!x.empty() && x == y, std::string("rank 1's checkpoint differs from rank 0's ") + when);
}

// Runs f(r) for ranks 0 and 1 at once (each rank's collectives wait for the other's).
template <class F> void on_two_ranks(F f) {
  std::exception_ptr error;
  std::thread other([&] {
    try {
      f(1);
    } catch (...) {
      error = std::current_exception();
    }
  });
  f(0);
  other.join();
  if (error) std::rethrow_exception(error);
}

// Attaching makes every rank rank 0's, however they started: rank 1 with
// other weights (drawn after rank 0's), its own drawn shuffle seed, no
// momentum and no steps; rank 0 after 3 steps with momentum, or resumed from
// a momentum checkpoint. Their checkpoints agree to the byte after attach and
// after an epoch together (which reads the momentum, the optimizer's step
// count and the shuffle generator).
void attach_makes_rank_0s_state(const std::shared_ptr<Context> &ctx) {
  Tensor x, y;
  make_data(ctx, kSamples, 6, &x, &y);
  std::shared_ptr<Dataset> train = Dataset::from_tensors(x, y);
  TrainerOptions o = options_for(12);
  o.given.reset(size_t(Option::shuffle_seed));  // drawn from the context: each rank's differs
  for (int resumed = 0; resumed < 2; ++resumed) {
    test::g_case = resumed ? "attach: rank 0 resumed a checkpoint" : "attach: rank 0 took 3 steps";
    std::shared_ptr<Model> m0 = make_model(ctx), m1 = make_model(ctx);
    Trainer t0(m0, o), t1(m1, o);
    if (resumed) {
      Trainer writer(make_model(ctx), o);
      writer.epoch(*train);
      writer.write_checkpoint("data_parallel_test_resume.safetensors");
      t0.load_checkpoint("data_parallel_test_resume.safetensors");
      std::remove("data_parallel_test_resume.safetensors");
    } else {
      for (uint32_t i = 0; i < 3; ++i) {
        Tensor bx, by;
        make_data(ctx, 12, 20 + i, &bx, &by);
        t0.step(bx, by, false);
      }
    }
    auto hub = std::make_shared<Hub>(2);
    on_two_ranks([&](int64_t r) { (r == 0 ? t0 : t1).attach(std::make_shared<ThreadCollective>(hub, r)); });
    check_same_state(t0, t1, "after attach");
    on_two_ranks([&](int64_t r) { (r == 0 ? t0 : t1).epoch(*train); });
    check_same_state(t0, t1, "after an epoch");
  }
}

void cpu_suite(Context &c) {
  std::shared_ptr<Context> ctx = c.shared_from_this();
  same_as_one_trainer(ctx, 2);
  same_as_one_trainer(ctx, 3);
  attach_makes_rank_0s_state(ctx);
  progress_and_cancel(ctx);
  bad_input(ctx);
  replica_fails_alone(ctx);
  buckets_change_nothing(ctx, KILN_PRECISION_FP32);
  buckets_change_nothing(ctx, KILN_PRECISION_BF16);
}

}  // namespace
}  // namespace kiln

int main() {
  return kiln::test::run_suite("data_parallel_test", 1, kiln::cpu_suite, [](kiln::Context &) {});
}
