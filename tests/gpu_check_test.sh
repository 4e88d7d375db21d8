#!/usr/bin/env bash
# scripts/gpu-check.sh's crash backtraces, without a GPU: a fake build
# whose CTest suite holds a test program that calls a NULL function pointer
# (as 17 GPU tests seemed to on the H200), one that fails an assertion and
# one that passes, with gdb standing in for cuda-gdb. The `test` stage must
# record a backtrace of the crash, naming the function that made the call,
# and none of the others, and pack the summary and the logs into
# KILN_CHECK_PACK. Then the sanitize stage over fake programs and a fake
# compute-sanitizer: which reports are findings. Exits 77 without gdb or a
# C compiler.
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

# The sanitize stage, with a compute-sanitizer that runs the program and
# exits 1 when it printed a report, as --error-exitcode 1 does: each report
# sorted by scripts/sanitizer_verdict.py, the runs of KILN_SANITIZE_RUNS in
# their order, two at a time.
b2="$work/build2"
mkdir -p "$b2/tests"
report() {  # NAME LINES...: a test program that prints the reports LINES
  local name=$1; shift
  { echo '#!/bin/sh'; for line in "$@"; do printf "printf '%%s\\n' '%s'\n" "$line"; done; } >"$b2/$name"
  chmod +x "$b2/$name"
}
report nccl_cuda '========= Program hit cudaErrorNoKernelImageForDevice (error 209) on CUDA API call to cudaFuncGetAttributes.' \
  '=========     Saved host backtrace up to driver entry point at error' \
  '=========         Host Frame: ncclInitKernelsForDevice(int, int, unsigned long*) in enqueue.cc:52 [0x6d9d3] in libnccl.so.2' \
  '========= '
report bug_cuda '========= Invalid __global__ read of size 4 bytes' '=========     at kiln_kernel+0x10' '========= '
report lost_cuda '========= Internal Sanitizer Error: Detected a failure to track a kernel launch.' '========= '
report clean_cuda
# A run the limit cuts short, after a finding: the partial log still counts.
report slow_cuda '========= Invalid __global__ read of size 4 bytes' '=========     at kiln_kernel+0x20' '========= '
echo 'exec sleep 20' >>"$b2/slow_cuda"
# A test program that fails: the tool says so, and it is no finding of kiln's.
report fails_cuda
echo 'exit 1' >>"$b2/fails_cuda"
# The tool lost track, then the program failed: inconclusive, not a finding.
report lostfails_cuda '========= Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception.' '========= '
echo 'exit 1' >>"$b2/lostfails_cuda"
report tests/sanitizer_canary
cat >"$b2/CTestTestfile.cmake" <<CT
add_test(nccl_cuda "$b2/nccl_cuda")
add_test(bug_cuda "$b2/bug_cuda")
add_test(lost_cuda "$b2/lost_cuda")
add_test(clean_cuda "$b2/clean_cuda")
add_test(slow_cuda "$b2/slow_cuda")
add_test(fails_cuda "$b2/fails_cuda")
add_test(lostfails_cuda "$b2/lostfails_cuda")
CT
cat >"$work/bin/compute-sanitizer" <<'SAN'
#!/bin/bash
# --help | --tool TOOL --error-exitcode 1 [--kernel-name FILTER] PROGRAM ARGS...
if [[ $1 == --help ]]; then echo '  --kernel-name arg   only the kernels the filter names'; exit 0; fi
tool=$2; shift 4
if [[ $1 == --kernel-name ]]; then echo "filter: $2"; shift 2; fi
if [[ $1 == */sanitizer_canary ]]; then
  case $tool in
    memcheck) echo "========= Invalid __global__ write of size 4 bytes" ;;
    racecheck) echo "========= Error: Race reported between Write access and Read access" ;;
    initcheck) echo "========= Uninitialized __global__ memory read of size 4 bytes" ;;
  esac
  exit 1
fi
out="$(mktemp)"
"$@" | tee "$out"
rc=${PIPESTATUS[0]}
[[ $rc -eq 0 ]] || echo "========= Target application returned an error"
echo "========= ERROR SUMMARY: 0 errors"
grep -q '^========= [A-Z]' "$out" && exit 1
[[ $rc -eq 0 ]] || exit 1
exit 0
SAN
chmod +x "$work/bin/compute-sanitizer"
rc=0
PATH="$work/bin:$PATH" KILN_BUILD_DIR="$b2" KILN_CHECK_BUDGET=120 KILN_SANITIZE_JOBS=2 KILN_SANITIZER_TIMEOUT=8 \
  KILN_SANITIZE_RUNS="memcheck:nccl_cuda memcheck:bug_cuda racecheck:lost_cuda initcheck:clean_cuda memcheck:slow_cuda synccheck:fails_cuda racecheck:lostfails_cuda" \
  "$root/scripts/gpu-check.sh" "$work/out2" sanitize >"$work/log2" 2>&1 || rc=$?
summary="$work/out2/summary.txt"
if [[ $rc -ne 1 ]]; then cat "$work/log2"; fail "gpu-check's sanitize exited $rc, expected 1 (a finding)"; fi
want='^sanitize canary memcheck +passed
^sanitize canary racecheck +passed
^sanitize canary initcheck +passed
^sanitize memcheck nccl_cuda +passed .*API errors inside other libraries 1,.*\(libnccl.so.2\)
^sanitize memcheck bug_cuda +FAILED .*kiln.s 1,
^sanitize racecheck lost_cuda +UNSURE .*tool lost track 1.*\[kiln.s kernels only\]$
^sanitize initcheck clean_cuda +passed [^[]*$
^sanitize memcheck slow_cuda +FAILED +TIMEOUT before the limit: kiln.s 1,
^sanitize synccheck fails_cuda +FAILED +FAILED\(rc=1\) kiln.s 0, .*, the test program failed
^sanitize racecheck lostfails_cuda +UNSURE +FAILED\(rc=1\) kiln.s 0, .*tool lost track 1, the test program failed'
mapfile -t lines <"$summary"
i=0
while IFS= read -r pattern; do
  grep -qE "$pattern" <<<"${lines[$i]:-}" || { cat "$summary"; fail "summary line $((i + 1)) is not /$pattern/"; }
  i=$((i + 1))
done <<<"$want"
[[ ${#lines[@]} -eq $i ]] || { cat "$summary"; fail "the summary has ${#lines[@]} lines, expected $i"; }
# racecheck, canary included, sees kiln's kernels only; memcheck every kernel.
grep -qx 'filter: kns=kiln' "$work/out2/sanitize-racecheck-lost_cuda.log" || fail "racecheck ran without the filter"
grep -qx 'filter: kns=kiln' "$work/out2/sanitize-canary-racecheck.log" || fail "racecheck's canary ran without the filter"
if grep -q '^filter:' "$work/out2/sanitize-memcheck-bug_cuda.log"; then fail "memcheck ran with the filter"; fi
echo "gpu_check_test: passed"
