/* C trampolines for kiln's callbacks: kiln calls these with the user pointer
 * it was given, which is a cgo.Handle value, never a Go pointer; they pass it
 * on to the exported Go functions of callback.go. A separate file because a
 * cgo preamble next to //export may only declare. */
#include <stdint.h>
#include <kiln/kiln.h>
#include "_cgo_export.h"

int kilnGoProgressTrampoline(void *user, const kiln_progress *progress) {
  return kilnGoProgress((uintptr_t)user, (kiln_progress *)progress);
}

int kilnGoLogTrampoline(void *user, const kiln_log_record *record) {
  kilnGoLog((uintptr_t)user, (int)record->level, (char *)record->message);
  return 0;
}
