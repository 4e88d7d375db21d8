// Handle ids never repeat in a process's life (src/api/handles.hpp; issue 21
// item 3). A test cannot create 2^48 handles, so it sets a registry's
// counter near the points that matter and checks what the next ids are:
//  - the old wrap point: ids were kHandleMark | 16 * count with bit 33 in the
//    mark, so the 536,870,913th handle got the first handle's id;
//  - every power of two of the counter;
//  - the end of the counter: the last ids are handed out, then Registry::add
//    (make_handle's only step that makes an id) fails with
//    KILN_ERROR_OUT_OF_MEMORY instead of wrapping.
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <set>
#include <string>

#include "api/handles.hpp"

namespace {

int failures = 0;

void expect(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

using kiln::api::kHandleMark;
using kiln::api::kHandleShift;
using kiln::api::kMaxHandles;
using kiln::api::Registry;

uintptr_t add(Registry &r) { return r.add(1, std::make_shared<int>(0)); }

uint64_t count_of(uintptr_t id) { return (id & ~kHandleMark) >> kHandleShift; }

// No x86-64 (4- or 5-level paging) or AArch64 (top byte ignored, 52-bit
// addresses) user address looks like this.
bool faults_if_dereferenced(uintptr_t id) {
  return (id >> 63) == 0 && ((id >> 62) & 1) == 1 && ((id >> 52) & 0xf) != 0 && (id & 15) == 0;
}

}  // namespace

int main() {
  // The arithmetic. 2^48 - 1 ids; at a million handles a second, years.
  expect(kMaxHandles == (uint64_t(1) << 48) - 1, "2^48 - 1 ids");
  const double years_at_1m = double(kMaxHandles) / 1e6 / (365.25 * 86400);
  const double days_at_11m = double(kMaxHandles) / 11.2e6 / 86400;
  std::printf("%" PRIu64 " ids: %.1f years at 1 M handles/s, %.0f days at 11.2 M/s (one thread doing nothing else)\n",
              kMaxHandles, years_at_1m, days_at_11m);
  expect(years_at_1m > 8.5, "more than 8.5 years at a million handles a second");

  Registry r;
  std::set<uintptr_t> seen;
  const uintptr_t first = add(r);
  expect(count_of(first) == 1 && faults_if_dereferenced(first), "the first id: count 1, not an address");
  seen.insert(first);

  // Past the old wrap point (2^29 handles): new ids, the first one still live.
  r.next = (uint64_t(1) << 29) - 2;
  for (int i = 0; i < 4; ++i) {
    const uintptr_t id = add(r);
    expect(seen.insert(id).second, "an id not seen before, past 2^29");
    expect(faults_if_dereferenced(id), "not an address, past 2^29");
  }
  expect(r.live.count(first) == 1 && r.live.size() == 5, "every id live in its own entry past 2^29");

  // Each power of two of the counter maps to an id of its own.
  for (unsigned bit = 30; bit < 48; ++bit) {
    r.next = (uint64_t(1) << bit) - 1;
    const uintptr_t id = add(r);
    expect(count_of(id) == uint64_t(1) << bit, "the id encodes 2^bit");
    expect(seen.insert(id).second && faults_if_dereferenced(id), "a new id at 2^bit, not an address");
  }

  // The end: the last two ids, then a refusal; nothing wraps.
  r.next = kMaxHandles - 2;
  for (int i = 0; i < 2; ++i) {
    const uintptr_t id = add(r);
    expect(count_of(id) == kMaxHandles - 1 + uint64_t(i), "the last ids encode the last counts");
    expect(seen.insert(id).second && faults_if_dereferenced(id), "the last ids: new, not addresses");
  }
  const size_t live = r.live.size();
  try {
    add(r);
    expect(false, "OUT_OF_MEMORY once every id is used");
  } catch (const kiln::Error &e) {
    expect(e.status() == KILN_ERROR_OUT_OF_MEMORY, "OUT_OF_MEMORY once every id is used");
    expect(std::string(e.what()).find("ids are never reused") != std::string::npos, "a message that says why");
  }
  expect(r.live.size() == live && r.next == kMaxHandles, "a refusal registers nothing and counts nothing");
  std::printf("%s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
