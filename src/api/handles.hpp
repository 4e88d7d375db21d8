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

#include <cstdint>
#include <cstring>
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
class DataParallel;
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
struct kiln_trainer { std::shared_ptr<kiln::DataParallel> value; };
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

// The registry of live handles. A handle the caller holds is not an address
// but a never-reused id dressed as a pointer (kHandleMark in the high bits,
// a counter below): a released handle can never come back as a new object,
// even of the same type (no ABA through address reuse), and the non-canonical
// address faults at once if anything ever dereferenced it. The id maps to
// the real struct and its tag under one mutex; kiln's calls are coarse
// enough that the hash probe never shows.
struct Registry {
  struct Entry {
    int tag = 0;
    std::shared_ptr<void> object;  // the handle struct (H)
  };
  std::mutex mutex;
  std::unordered_map<uintptr_t, Entry> live;
  uintptr_t next = 0;  // ids handed out so far
};
Registry &registry();

// High bits no x86-64 or AArch64 user address has ("KILN" in ASCII).
constexpr uintptr_t kHandleMark = uintptr_t(0x4b494c4eull) << 32;
constexpr uintptr_t kHandleStep = 16;  // ids look aligned, as real pointers would

// Records the failure for kiln_last_error and returns status.
kiln_status set_error(kiln_status status, const char *message) noexcept;

[[noreturn]] void invalid_handle(const char *what, const char *type);

inline void require(const void *p, const char *what) {
  if (!p) fail(KILN_ERROR_INVALID_ARGUMENT, std::string(what) + " is NULL");
}

// The registry entry of h when it is a live handle of type H, else null.
// The registry's mutex must be held.
template <class H> Registry::Entry *find_live(Registry &r, const H *h) {
  auto it = r.live.find(reinterpret_cast<uintptr_t>(h));
  if (it == r.live.end() || it->second.tag != HandleTag<std::remove_const_t<H>>::id) return nullptr;
  return &it->second;
}

// Checks that h is a live handle of its type and returns its struct. Use for
// handles whose contents only the calling thread touches (options, specs);
// objects a call must keep alive while it runs are taken with value().
template <class H> H *lookup(H *h, const char *what) {
  require(h, what);
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Registry::Entry *e = find_live(r, h);
  if (!e) invalid_handle(what, HandleTag<std::remove_const_t<H>>::name);
  return static_cast<H *>(e->object.get());
}

// A copy of what h owns, taken under the registry lock, so a concurrent
// release on another thread (or from a callback) cannot pull it away mid-call.
template <class H> auto value(const H *h, const char *what) -> decltype(h->value) {
  require(h, what);
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Registry::Entry *e = find_live(r, h);
  if (!e) invalid_handle(what, HandleTag<H>::name);
  return static_cast<const H *>(e->object.get())->value;
}

// A new registered handle owning v.
template <class H, class V> H *make_handle(V &&v) {
  std::shared_ptr<void> object = std::make_shared<H>(H{std::forward<V>(v)});
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.next += kHandleStep;
  const uintptr_t id = kHandleMark | r.next;
  r.live[id] = Registry::Entry{HandleTag<H>::id, std::move(object)};
  return reinterpret_cast<H *>(id);
}

// The *_retain entry points: a second registered handle owning a copy of
// what h owns (a shared_ptr, or a Tensor that shares its storage), so each
// handle is released on its own and the object lives until the last is.
template <class H> kiln_status retain_handle(const H *h, const char *what, H **out) noexcept {
  return guard(
      [&] {
        auto v = value(h, what);
        require(out, "out");
        *out = make_handle<H>(std::move(v));
      },
      out);
}

// Unregisters h and drops its struct; NULL, unknown and already released
// handles are ignored (release functions return void and must never crash).
template <class H> void release_handle(H *h) noexcept {
  if (!h) return;
  std::shared_ptr<void> object;  // destroyed outside the lock: destructors may release other objects
  {
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    Registry::Entry *e = find_live(r, h);
    if (!e) return;
    object = std::move(e->object);
    r.live.erase(reinterpret_cast<uintptr_t>(h));
  }
}

// A caller's enum argument after checking that its integer representation
// is an enumerator in [lo, hi] (INVALID_ARGUMENT "unknown <what> N"). The
// value is read through its bytes: a C caller may pass any int, and loading
// an out-of-range value as the C++ enum type would be undefined behaviour.
template <class E> E checked_enum(const E &e, int lo, int hi, const char *what) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized here");
  int raw;
  std::memcpy(&raw, &e, sizeof raw);
  if (raw < lo || raw > hi) fail(KILN_ERROR_INVALID_ARGUMENT, std::string("unknown ") + what + " " + std::to_string(raw));
  return static_cast<E>(raw);
}

// Validates a caller's device value (kind known; index -1 for the CPU,
// >= 0 for CUDA) and converts it; existence is checked by the context.
Device device(const kiln_device &d);
// Validates a caller's dtype value.
DType dtype(const kiln_dtype &d);

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
