// What every C entry point shares: the handle structs behind the opaque C
// types, the registry of live handles (so a released or foreign pointer is
// reported, not dereferenced), and `guard`, which turns any C++ exception into
// a kiln_status plus the thread-local last-error message.
//
// Pattern of an entry point:
//
//   kiln_status kiln_tensor_to(const kiln_tensor *t, kiln_device d, kiln_tensor **out) {
//     return kiln::api::guard([&] {
//       kiln::Tensor src = kiln::api::value(t, "tensor");   // copied under the registry lock
//       kiln::api::require(out, "out");
//       *out = kiln::api::make_handle<kiln_tensor>(src.to(kiln::api::device(d)));
//     }, out);
//   }
//
// Handles are created last, after every fallible step, so a failure never
// leaks one; guard sets the listed out-pointers to null before running and
// again on failure.
#pragma once

#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

#include "core/context.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"

namespace kiln {
class Model;
class ModelSpec;
class Dataset;
class Trainer;
struct TrainerOptions;
struct History;
class Collective;
}  // namespace kiln

// The structs behind the opaque handles. `value` is what the handle owns.
struct kiln_context { std::shared_ptr<kiln::Context> value; };
struct kiln_context_options { kiln::ContextOptions value; };
struct kiln_tensor { kiln::Tensor value; };
struct kiln_model_spec { std::shared_ptr<kiln::ModelSpec> value; };
struct kiln_model { std::shared_ptr<kiln::Model> value; };
struct kiln_dataset { std::shared_ptr<kiln::Dataset> value; };
struct kiln_trainer_options { std::shared_ptr<kiln::TrainerOptions> value; };
struct kiln_trainer { std::shared_ptr<kiln::Trainer> value; };
struct kiln_history { std::shared_ptr<kiln::History> value; };
struct kiln_communicator { std::shared_ptr<kiln::Collective> value; };

namespace kiln::api {

// One tag per handle type, so a handle of one type passed as another is
// reported as invalid too.
template <class H> struct HandleTag;
#define KILN_HANDLE_TAG(H, N, NAME) \
  template <> struct HandleTag<H> { static constexpr int id = N; static constexpr const char *name = NAME; };
KILN_HANDLE_TAG(kiln_context, 1, "context")
KILN_HANDLE_TAG(kiln_context_options, 2, "context options")
KILN_HANDLE_TAG(kiln_tensor, 3, "tensor")
KILN_HANDLE_TAG(kiln_model_spec, 4, "model spec")
KILN_HANDLE_TAG(kiln_model, 5, "model")
KILN_HANDLE_TAG(kiln_dataset, 6, "dataset")
KILN_HANDLE_TAG(kiln_trainer_options, 7, "trainer options")
KILN_HANDLE_TAG(kiln_trainer, 8, "trainer")
KILN_HANDLE_TAG(kiln_history, 9, "history")
KILN_HANDLE_TAG(kiln_communicator, 10, "communicator")
#undef KILN_HANDLE_TAG

// The registry: live handle address -> tag id, under one mutex. Lookups are a
// hash probe; kiln's calls are coarse enough that this never shows.
struct Registry {
  std::mutex mutex;
  std::unordered_map<const void *, int> live;
};
Registry &registry();

// Records the failure for kiln_last_error and returns status.
kiln_status set_error(kiln_status status, const char *message) noexcept;

[[noreturn]] void invalid_handle(const char *what, const char *type);

inline void require(const void *p, const char *what) {
  if (!p) fail(KILN_ERROR_INVALID_ARGUMENT, std::string(what) + " is NULL");
}

// Checks that h is a live handle of its type and returns it. Use for handles
// whose contents only the calling thread touches (options, trainers).
template <class H> H *lookup(H *h, const char *what) {
  require(h, what);
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.find(h);
  if (it == r.live.end() || it->second != HandleTag<std::remove_const_t<H>>::id)
    invalid_handle(what, HandleTag<std::remove_const_t<H>>::name);
  return h;
}

// A copy of what h owns, taken under the registry lock, so a concurrent
// release on another thread cannot pull it away mid-call.
template <class H> auto value(const H *h, const char *what) -> decltype(h->value) {
  require(h, what);
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.find(h);
  if (it == r.live.end() || it->second != HandleTag<H>::id) invalid_handle(what, HandleTag<H>::name);
  return h->value;
}

// A new registered handle owning v.
template <class H, class V> H *make_handle(V &&v) {
  H *h = new H{std::forward<V>(v)};
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.live[h] = HandleTag<H>::id;
  return h;
}

// Unregisters and deletes h; NULL, unknown and already released pointers are
// ignored (release functions return void and must never crash).
template <class H> void release_handle(H *h) noexcept {
  if (!h) return;
  {
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.live.find(h);
    if (it == r.live.end() || it->second != HandleTag<H>::id) return;
    r.live.erase(it);
  }
  delete h;  // outside the lock: destructors may release other handles' objects
}

// Validates a caller's device value (kind known; index -1 for the CPU,
// >= 0 for CUDA) and converts it; existence is checked by the context.
Device device(kiln_device d);
// Validates a caller's dtype value.
DType dtype(kiln_dtype d);

template <class T> inline void clear_out(T **p) noexcept { if (p) *p = nullptr; }
template <class T> inline void clear_out(T *p) noexcept { if (p) *p = T{}; }

// Runs f, mapping exceptions to statuses. outs are zeroed first and again on
// failure.
template <class F, class... Outs> kiln_status guard(F &&f, Outs... outs) noexcept {
  (clear_out(outs), ...);
  kiln_status status;
  try {
    f();
    return KILN_OK;
  } catch (const Error &e) {
    status = set_error(e.status(), e.what());
  } catch (const std::bad_alloc &) {
    status = set_error(KILN_ERROR_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception &e) {
    status = set_error(KILN_ERROR_INTERNAL, e.what());
  } catch (...) {
    status = set_error(KILN_ERROR_INTERNAL, "unknown exception inside kiln");
  }
  (clear_out(outs), ...);
  return status;
}

// The shape of every entry point with one handle in and one result out
// (getters, and ops that make a new tensor from one): *out = read(what h
// owns), with h checked and out required. read receives the copy taken under
// the registry lock.
template <class H, class Out, class Read>
kiln_status query(const H *h, const char *what, Out *out, Read read) noexcept {
  return guard(
      [&] {
        auto v = value(h, what);
        require(out, "out");
        *out = read(v);
      },
      out);
}

}  // namespace kiln::api
