// Training checkpoints: one safetensors file with the model's parameters
// (under their nn.Sequential names, as in a model file), the
// optimizer state per parameter ("optimizer.exp_avg.0.weight", ...) and
// metadata: the counters, the shuffle generator's position, the spec, the
// options the table marks KILN_OPTION_CHECKPOINT (train/options_table.h:
// the optimizer kind and hyper-parameters, by the table's names and texts)
// and, when written from a progress callback within an epoch, where that
// epoch stands ("epoch_*": its batches done, its shuffle, its statistics
// so far), so that the next epoch finishes it. Loading checks everything
// against the trainer, reads into staging buffers, and only then commits,
// so a bad file leaves the trainer unchanged.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "core/excerpt.hpp"
#include "core/number_text.hpp"
#include "core/version.hpp"
#include "io/safetensors.hpp"
#include "nn/spec.hpp"
#include "train/trainer.hpp"

namespace kiln {

namespace {

constexpr const char *kFormat = "kiln-checkpoint";

// A named tensor the checkpoint holds, and where it goes in the trainer.
struct Slot {
  std::string name;
  Tensor target;  // a view of the parameters or of an optimizer state buffer
};

std::vector<Slot> slots(const Model &model, const std::vector<std::pair<std::string, Tensor>> &state,
                        const Tensor &params) {
  std::vector<Slot> out;
  const auto views = [&](const std::string &prefix, const Tensor &flat) {
    for (const ParameterInfo &p : model.parameters())
      out.push_back({prefix + p.name, flat.rows(p.offset, p.offset + p.shape.numel()).reshape(p.shape)});
  };
  views("", params);
  for (const auto &s : state) views("optimizer." + s.first + ".", s.second);
  return out;
}

// The text of a metadata key the checkpoint must have.
const std::string &required_text(const std::map<std::string, std::string> &meta, const std::string &key,
                                 const std::string &path) {
  auto it = meta.find(key);
  check(it != meta.end(), KILN_ERROR_FORMAT,
        path + " is not a complete kiln checkpoint: metadata lacks \"" + key + "\"");
  return it->second;
}

uint64_t parse_u64(const std::map<std::string, std::string> &meta, const std::string &key, const std::string &path) {
  const std::string &text = required_text(meta, key, path);
  errno = 0;
  char *end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  // Digits alone: strtoull would also take leading spaces and a sign.
  check(!text.empty() && std::isdigit(static_cast<unsigned char>(text[0])) && *end == '\0' && errno == 0,
        KILN_ERROR_FORMAT, path + ": metadata \"" + key + "\" is \"" + excerpt(text) + "\", not an unsigned integer");
  return uint64_t(v);
}

// A step, epoch or update count: below kCounterLimit.
int64_t parse_counter(const std::map<std::string, std::string> &meta, const std::string &key, const std::string &path) {
  const uint64_t v = parse_u64(meta, key, path);
  check(v < uint64_t(kCounterLimit), KILN_ERROR_FORMAT,
        path + ": metadata \"" + key + "\" is " + std::to_string(v) + ", not below 2^62, the limit of kiln's counters");
  return int64_t(v);
}

double parse_double(const std::map<std::string, std::string> &meta, const std::string &key, const std::string &path) {
  const std::string &text = required_text(meta, key, path);
  errno = 0;
  char *end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  check(!text.empty() && *end == '\0' && errno == 0 && std::isfinite(v), KILN_ERROR_FORMAT,
        path + ": metadata \"" + key + "\" is \"" + excerpt(text) + "\", not a finite number");
  return v;
}

// The keys of a position within an epoch (Trainer::in_epoch_).
constexpr const char *kEpochBatches = "epoch_batches_done";

}  // namespace

void Trainer::write_checkpoint(const std::string &path) const {
  check_model_device();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const Slot &s : slots(*model_, optimizer_.state(), model_->flat())) tensors.emplace_back(s.name, s.target);
  std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"kiln.version", kVersionText},
      {"kiln.spec", model_->description()},
      {"epochs_done", std::to_string(epochs_done_)},
      {"steps_done", std::to_string(steps_done_)},
      {"optimizer_steps", std::to_string(optimizer_.steps())},
      {"shuffle_seed", std::to_string(rng_seed_)},  // the generator's seed in use, set or drawn
      {"shuffle_counter", std::to_string(rng_counter_)},
  };
  // Where an epoch stands: written from within one, or after loading a
  // checkpoint that was, before training took its position up (a file saved
  // again at once, as a job's preemption hook does, resumes the same).
  const EpochPosition &at = in_epoch_.batches > 0 ? in_epoch_ : resume_;
  if (at.batches > 0) {
    meta.emplace(kEpochBatches, std::to_string(at.batches));
    meta.emplace("epoch_samples", std::to_string(at.samples));
    meta.emplace("epoch_batch", std::to_string(at.batch));
    meta.emplace("epoch_shuffle", std::to_string(at.shuffle));
    meta.emplace("epoch_loss_sum", number_text(at.so_far.loss_sum));
    meta.emplace("epoch_correct", number_text(at.so_far.correct));
    meta.emplace("epoch_bad_labels", number_text(at.so_far.bad_labels));
  }
  const TrainerOptions resolved = options_.resolved();
  for (int i = 0; i < kOptionCount; ++i)
    if (option_info(Option(i)).flags & KILN_OPTION_CHECKPOINT)
      meta.emplace(option_info(Option(i)).name, option_text(resolved, Option(i)));
  io::write_safetensors(path, tensors, meta);
}

void Trainer::save_checkpoint(const std::string &path) const {
  if (!comm_) return write_checkpoint(path);
  // Distributed: the ranks hold the same state, so rank 0 alone writes (the
  // ranks may share a file system), then tells the others whether it did, so
  // that every rank returns the same status and a rank that goes on to read
  // the file finds it complete.
  int64_t outcome[2] = {KILN_OK, 0};  // status; the message follows, when there is one
  std::string message;
  if (comm_->rank() == 0) {
    try {
      write_checkpoint(path);
    } catch (const Error &e) {
      outcome[0] = e.status();
      message = e.what();
    }
    outcome[1] = int64_t(std::min<size_t>(message.size(), 1024));
  }
  comm_->broadcast(Device::cpu(), outcome, sizeof outcome, 0);
  if (outcome[0] == KILN_OK) return;
  message.resize(size_t(outcome[1]));
  comm_->broadcast(Device::cpu(), message.data(), outcome[1], 0);
  fail(kiln_status(outcome[0]), comm_->rank() == 0 ? message : "rank 0 could not write the checkpoint: " + message);
}

void Trainer::load_checkpoint(const std::string &path) {
  BusyScope busy(busy_, "kiln_trainer_load_checkpoint");
  check_model_device();
  const io::SafetensorsFile file = io::SafetensorsFile::open(path);
  const auto &meta = file.metadata();
  auto format = meta.find("format");
  check(format != meta.end() && format->second == kFormat, KILN_ERROR_FORMAT,
        path + " is not a kiln checkpoint: its metadata lacks \"format\": \"kiln-checkpoint\"");
  // The same parameter shapes are not enough: a checkpoint of 5-8-3 (ReLU)
  // loaded into 5-8-3:tanh would not continue its run. Files without the
  // key (not written by kiln) are checked by their tensors alone.
  auto spec = meta.find("kiln.spec");
  if (spec != meta.end() && spec->second != model_->description()) {
    try {
      ModelSpec().parse(spec->second);
    } catch (const Error &e) {
      fail(KILN_ERROR_FORMAT,
           path + ": metadata \"kiln.spec\" is " + quoted(spec->second) + ", which is not a model spec: " + e.what());
    }
  }
  check(spec == meta.end() || spec->second == model_->description(), KILN_ERROR_SHAPE_MISMATCH,
        path + " was written for the model " + excerpt(spec == meta.end() ? "" : spec->second) +
            " but this trainer's model is " + excerpt(model_->description()));
  auto kind = meta.find("optimizer");
  check(kind != meta.end(), KILN_ERROR_FORMAT,
        path + " is not a complete kiln checkpoint: metadata lacks \"optimizer\"");
  const std::string mine = option_text(options_, Option::optimizer);
  const std::string known = std::string("|") + option_info(Option::optimizer).names + "|";
  check(known.find("|" + kind->second + "|") != std::string::npos, KILN_ERROR_FORMAT,
        path + ": metadata \"optimizer\" is " + quoted(kind->second) + ", not one of " +
            option_info(Option::optimizer).names);
  check(kind->second == mine, KILN_ERROR_INVALID_ARGUMENT,
        path + " holds the state of the " + excerpt(kind->second) + " optimizer but this trainer uses " + mine);
  const int64_t epochs = parse_counter(meta, "epochs_done", path), steps = parse_counter(meta, "steps_done", path);
  const int64_t optimizer_steps = parse_counter(meta, "optimizer_steps", path);
  // Every update and every epoch is taken by steps, so neither counts more.
  check(optimizer_steps <= steps && epochs <= steps, KILN_ERROR_FORMAT,
        path + ": its counters do not fit each other: " + std::to_string(steps) + " steps, " +
            std::to_string(optimizer_steps) + " optimizer updates and " + std::to_string(epochs) +
            " epochs (each update and each epoch takes steps)");
  const uint64_t seed = parse_u64(meta, "shuffle_seed", path), counter = parse_u64(meta, "shuffle_counter", path);
  EpochPosition position;
  if (meta.count(kEpochBatches)) {
    position.batches = parse_counter(meta, kEpochBatches, path);
    position.samples = parse_counter(meta, "epoch_samples", path);
    position.batch = parse_counter(meta, "epoch_batch", path);
    position.shuffle = parse_u64(meta, "epoch_shuffle", path);
    position.so_far = {parse_double(meta, "epoch_loss_sum", path), parse_double(meta, "epoch_correct", path),
                       parse_double(meta, "epoch_bad_labels", path)};
    check(position.batches >= 1 && position.samples >= 1 && position.batch >= 1 && position.shuffle < counter &&
              position.batches <= steps,
          KILN_ERROR_FORMAT,
          path + ": its position within an epoch (" + std::to_string(position.batches) + " batches of " +
              std::to_string(position.batch) + " over " + std::to_string(position.samples) +
              " samples, shuffle " + std::to_string(position.shuffle) + ") does not fit its counters");
    // The statistics of the samples seen so far: every loss is >= 0, at most
    // each seen sample is right, and none has a bad label (the dataset's
    // labels are checked before an epoch starts).
    const int64_t seen = position.batches > (position.samples - 1) / position.batch
                             ? position.samples
                             : position.batches * position.batch;
    const PassStats &so_far = position.so_far;
    check(so_far.loss_sum >= 0 && so_far.correct >= 0 && so_far.correct <= double(seen) &&
              so_far.correct == std::floor(so_far.correct) && so_far.bad_labels == 0,
          KILN_ERROR_FORMAT,
          path + ": its statistics within an epoch (loss sum " + number_text(so_far.loss_sum) + ", " +
              number_text(so_far.correct) + " right, " + number_text(so_far.bad_labels) + " bad labels) do not fit " +
              std::to_string(seen) + " samples seen");
  }

  // Staging buffers in the trainer's layout; the committed buffers are
  // untouched until every tensor has been checked and read.
  const auto zeros_like = [](const Tensor &t) {
    return Tensor::full(t.context(), t.shape(), t.dtype(), t.device(), 0.0);
  };
  const Tensor staged_params = zeros_like(model_->flat());
  std::vector<std::pair<std::string, Tensor>> staged_state;
  for (const auto &s : optimizer_.state()) staged_state.emplace_back(s.first, zeros_like(s.second));
  const std::vector<Slot> expected = slots(*model_, staged_state, staged_params);
  // SGD's momentum buffers exist with momentum alone, one of the options the
  // trainer keeps as its own (kiln.h): a file without them leaves them at
  // zero, which the next update takes as torch.optim takes a buffer it has
  // not made yet (buf = grad), and a trainer without momentum leaves a
  // file's buffers unread.
  const std::string momentum_prefix = std::string("optimizer.") + Optimizer::kMomentumBuffer + ".";
  const auto is_momentum = [&](const std::string &name) { return name.rfind(momentum_prefix, 0) == 0; };
  const size_t file_momentum =
      size_t(std::count_if(file.entries().begin(), file.entries().end(),
                           [&](const io::SafetensorsFile::Entry &e) { return is_momentum(e.name); }));
  const bool has_momentum =
      std::any_of(expected.begin(), expected.end(), [&](const Slot &s) { return is_momentum(s.name); });
  std::vector<Slot> read;
  for (const Slot &s : expected)
    if (file_momentum > 0 || !is_momentum(s.name)) read.push_back(s);
  const std::string model = "model " + excerpt(model_->description());
  for (const Slot &s : read) {
    const io::SafetensorsFile::Entry *e = file.find(s.name);
    check(e != nullptr, KILN_ERROR_SHAPE_MISMATCH,
          path + " has no tensor \"" + s.name + "\": it was written for another architecture or optimizer setting "
                 "than this trainer's (" + model + ")");
    check(e->shape == s.target.shape(), KILN_ERROR_SHAPE_MISMATCH,
          "\"" + s.name + "\" has shape " + e->shape.str() + " in " + path + " but " + s.target.shape().str() +
              " in the trainer (" + model + ")");
    check(e->dtype == s.target.dtype(), KILN_ERROR_DTYPE_MISMATCH,
          "\"" + s.name + "\" is " + dtype_name(e->dtype) + " in " + path + " but " + dtype_name(s.target.dtype()) +
              " in the trainer");
  }
  const size_t unread = !has_momentum && optimizer_.config().kind == KILN_OPTIM_SGD ? file_momentum : 0;
  if (file.entries().size() != read.size() + unread) {
    // Every slot read was found, so the file has more: name one.
    std::set<std::string> known;
    for (const Slot &s : read) known.insert(s.name);
    std::string extra;
    for (const io::SafetensorsFile::Entry &e : file.entries()) {
      if (!known.count(e.name) && !(unread > 0 && is_momentum(e.name))) {
        extra = e.name;
        break;
      }
    }
    fail(KILN_ERROR_SHAPE_MISMATCH, path + " holds " + std::to_string(file.entries().size()) +
                                        " tensors but this trainer reads " + std::to_string(read.size() + unread) +
                                        " (" + model + ", " + mine + " with this trainer's settings): it has " +
                                        quoted(extra) + ", which is no parameter or optimizer state of this trainer");
  }
  for (const Slot &s : read) file.read_into(s.name, s.target);

  model_->flat().copy_from(staged_params);
  const auto state = optimizer_.state();
  for (size_t i = 0; i < state.size(); ++i) state[i].second.copy_from(staged_state[i].second);
  optimizer_.set_steps(optimizer_steps);
  epochs_done_ = epochs;
  steps_done_ = steps;
  rng_seed_ = seed;
  rng_counter_ = counter;
  resume_ = position;
}

}  // namespace kiln
