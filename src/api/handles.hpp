// What every C entry point shares: the handle structs behind the opaque C
// types, the registry of live handles (so a released or foreign pointer is
// reported, not dereferenced), and `guard`, which turns any C++ exception into
// a kiln_status plus the thread-local last-error message.
//
// Pattern of an entry point:
//
//   kiln_status kiln_tensor_to(const kiln_tensor *t, kiln_device d, kiln_tensor **out) {
//     return kiln::api::guard([&] {
//       kiln::Tensor src = kiln::api::value(t, "tensor");   // checked, and held until guard returns
//       kiln::api::require(out, "out");
//       *out = kiln::api::make_handle<kiln_tensor>(src.to(kiln::api::device(d)));
//     }, out);
//   }
//
// Every handle a call looks up is held (counted) until its guard returns,
// whatever other threads release meanwhile (CallPins). Handles are created
// last, after every fallible step, so a failure never leaks one; guard sets
// the listed out-pointers to null before running and again on failure.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

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
// but a never-reused id dressed as a pointer: kHandleMark in the top 12 bits,
// the count of ids handed out so far in bits 4..51. A released handle can
// never come back as a new object, even of the same type (no ABA through
// address reuse), and the address faults at once if anything ever
// dereferenced it. The id maps to the real struct and its tag under one
// mutex; kiln's calls are coarse enough that the hash probe never shows.
//
// The mark and the counter share no bit, so two ids are equal only when
// their counts are: ids never repeat. The counter has 48 bits, 2^48 - 1 ids
// in a process's life: at a million handles a second (a hundred times a busy
// service) that is 8.9 years, at the 11 million a second one thread manages
// when it does nothing else, 291 days. Past the last id, creating a handle
// fails with KILN_ERROR_OUT_OF_MEMORY rather than wrap
// (tests/handle_ids_test.cpp checks both ends).
//
// The mark: high bits no x86-64 or AArch64 user address has: bit 62 without bit 63 is
// not canonical on x86-64 (4- and 5-level paging), and bits 52..55 (0x4)
// stay set under AArch64's top-byte-ignore, beyond its 52-bit addresses.
constexpr uintptr_t kHandleMark = uintptr_t(0x4b4) << 52;
constexpr unsigned kHandleShift = 4;  // ids look 16-byte aligned, as real pointers would
constexpr uint64_t kMaxHandles = (uint64_t(1) << (52 - kHandleShift)) - 1;
static_assert(sizeof(uintptr_t) == 8, "handle ids are 64-bit");
static_assert(((uintptr_t(kMaxHandles) << kHandleShift) & kHandleMark) == 0, "the counter must not reach the mark");

struct Registry {
  struct Entry {
    int tag = 0;
    std::shared_ptr<void> object;  // the handle struct (H)
  };
  std::mutex mutex;
  std::unordered_map<uintptr_t, Entry> live;
  uint64_t next = 0;  // ids handed out so far

  // Registers object under the next id and returns it; OUT_OF_MEMORY once
  // every id has been used. The mutex must be held.
  uintptr_t add(int tag, std::shared_ptr<void> object) {
    if (next >= kMaxHandles)
      fail(KILN_ERROR_OUT_OF_MEMORY, "this process has created all " + std::to_string(kMaxHandles) +
                                         " handles it may (2^48 - 1; ids are never reused): restart it");
    const uintptr_t id = kHandleMark | (uintptr_t(next + 1) << kHandleShift);
    live[id] = Entry{tag, std::move(object)};
    ++next;  // after the insert, which may throw: an id is used only when handed out
    return id;
  }
};
Registry &registry();

// What keeps a call's objects alive: every handle struct an entry point looks
// up (lookup, value) is held here, on the calling thread, until the entry
// point's guard returns, so a release on another thread, or from a callback
// of the same call, cannot free an object while the call still uses it.
// Calls nest (a progress callback calls kiln): each guard drops only what it
// added.
struct CallPins {
  std::vector<std::shared_ptr<void>> held;
  int depth = 0;  // guards running on this thread
};
CallPins &call_pins();  // the calling thread's

// Holds object until the innermost running guard returns; INTERNAL outside
// any guard (an entry point that forgot it must not silently go unpinned).
inline void pin(const std::shared_ptr<void> &object) {
  CallPins &pins = call_pins();
  if (pins.depth == 0) fail(KILN_ERROR_INTERNAL, "a handle was looked up outside an entry point's guard");
  pins.held.push_back(object);
}

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

// Checks that h is a live handle of its type and returns its struct, pinned
// (see CallPins) until the entry point returns.
template <class H> H *lookup(H *h, const char *what) {
  require(h, what);
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Registry::Entry *e = find_live(r, h);
  if (!e) invalid_handle(what, HandleTag<std::remove_const_t<H>>::name);
  pin(e->object);
  return static_cast<H *>(e->object.get());
}

// A copy of what h owns, its struct pinned like lookup's.
template <class H> auto value(const H *h, const char *what) -> decltype(h->value) {
  return lookup(h, what)->value;
}

// A new registered handle owning v.
template <class H, class V> H *make_handle(V &&v) {
  std::shared_ptr<void> object = std::make_shared<H>(H{std::forward<V>(v)});
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return reinterpret_cast<H *>(r.add(HandleTag<H>::id, std::move(object)));
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

// One entry point's span in CallPins: drops, last first, what was pinned
// since it began. Popped before each object goes, so that a destructor that
// calls kiln (a DLPack deleter) finds the list consistent.
class PinScope {
 public:
  PinScope() noexcept : pins_(call_pins()), mark_(pins_.held.size()) { ++pins_.depth; }
  ~PinScope() {
    while (pins_.held.size() > mark_) {
      std::shared_ptr<void> last = std::move(pins_.held.back());
      pins_.held.pop_back();
    }
    --pins_.depth;
  }
  PinScope(const PinScope &) = delete;
  PinScope &operator=(const PinScope &) = delete;

 private:
  CallPins &pins_;
  size_t mark_;
};

// Runs f, mapping exceptions to statuses. outs are zeroed first and again on
// failure. The objects f looked up stay alive until f is done (PinScope), and
// are let go before the status is recorded.
template <class F, class... Outs> kiln_status guard(F &&f, Outs... outs) noexcept {
  (clear_out(outs), ...);
  kiln_status status;
  try {
    PinScope scope;
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
