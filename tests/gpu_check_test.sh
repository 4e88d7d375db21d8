#!/usr/bin/env bash
# scripts/gpu-check.sh's crash backtraces, without a GPU: a fake build
# whose CTest suite holds a test program that calls a NULL function pointer
# (as 17 GPU tests seemed to on the H200), one that fails an assertion and
# one that passes, with gdb standing in for cuda-gdb. The `test` stage must
# record a backtrace of the crash, naming the function that made the call,
# and none of the others, and pack the summary and the logs into
# KILN_CHECK_PACK. Exits 77 without gdb or a C compiler.
#
#   tests/gpu_check_test.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
command -v gdb >/dev/null || { echo "SKIP: no gdb"; exit 77; }
cc="$(command -v cc || command -v gcc || true)"
[[ -n $cc ]] || { echo "SKIP: no C compiler"; exit 77; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$work/build" "$work/bin"
cat >"$work/crash.c" <<'C'
#include <stdio.h>
#include <string.h>
typedef void (*fn)(void);
static fn volatile table[1];
__attribute__((noinline)) void call_through_table(void) { table[0](); }
int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "assert")) { fprintf(stderr, "expected 1, got 2\n"); return 1; }
  call_through_table();
  return 0;
}
C
"$cc" -O1 -g -o "$work/build/crash_cuda" "$work/crash.c"
cat >"$work/build/CTestTestfile.cmake" <<CT
add_test(crash_cuda "$work/build/crash_cuda")
set_tests_properties(crash_cuda PROPERTIES ENVIRONMENT "KILN_GPU_CHECK_TEST=1" WORKING_DIRECTORY "$work/build")
add_test(assert_cuda "$work/build/crash_cuda" "assert")
add_test(fine_cuda "/bin/true")
CT
ln -s "$(command -v gdb)" "$work/bin/cuda-gdb"

rc=0
PATH="$work/bin:$PATH" KILN_BUILD_DIR="$work/build" KILN_CHECK_BUDGET=120 KILN_CHECK_PACK="$work/pack" \
  "$root/scripts/gpu-check.sh" "$work/out" test >"$work/log" 2>&1 || rc=$?
summary="$work/out/summary.txt"
if [[ $rc -ne 1 ]]; then cat "$work/log"; fail "gpu-check exited $rc, expected 1 (a failed stage)"; fi
if ! grep -qE '^test +FAILED .*2 tests failed out of 3' "$summary"; then cat "$summary"; fail "the test stage did not fail as planted"; fi
if ! grep -qE '^backtrace test crash_cuda +taken .*call_through_table' "$summary"; then
  cat "$summary" "$work/out"/backtrace-* 2>/dev/null || true
  fail "no backtrace of crash_cuda naming call_through_table"
fi
grep -q 'KILN_GPU_CHECK_TEST=1' "$work/out/tests/crash_cuda.sh" || fail "the rerun lacks the test's environment"
if grep -qE '^backtrace test (assert|fine)_cuda' "$summary"; then cat "$summary"; fail "a backtrace of a test that did not crash"; fi
# What the device tool brings back: the summary and every log.
cmp -s "$summary" "$work/pack/summary.txt" || fail "the packed summary is not the summary"
packed="$(tar tzf "$work/pack/logs.tar.gz")"
grep -qx 'out/backtrace-test-crash_cuda.log' <<<"$packed" || fail "the packed logs lack the backtrace"
echo "gpu_check_test: passed"
