#!/usr/bin/env bash
# The second device call of 2026-11-27's fourth GPU session: call 1's
# findings, fixed, checked with the few minutes left.
#  a/  gpu-check env,build,test-default,test: test_cuda_fast_path's bf16 Adam
#      comparison (now: at most 10% of the weights outside the bounds);
#  b/  test_cuda_fast_path under initcheck (the bf16 weights, now zeroed when
#      allocated, were read by cuDNN's and cuBLASLt's timing), memcheck,
#      synccheck and racecheck, with the time left.
cd "$(dirname "$0")/../../.." || exit 2
mkdir -p "$OUT/a" "$OUT/b"
t0=$SECONDS
KILN_CHECK_BUDGET=${BUDGET_A:-110} KILN_BACKTRACES=1 KILN_CHECK_PACK="$OUT/a" \
  scripts/gpu-check.sh /tmp/gca env,build,test-default,test
echo "gpu-check a rc=$? after $((SECONDS - t0)) s"
left=$((${BUDGET:-215} - (SECONDS - t0)))
KILN_CHECK_BUDGET=$left KILN_SANITIZE_BUDGET=$((left - 8)) KILN_SANITIZER_TIMEOUT=$left KILN_SANITIZE_JOBS=4 \
  KILN_CHECK_PACK="$OUT/b" KILN_SANITIZE_RUNS="test_cuda_fast_path_cuda" scripts/gpu-check.sh /tmp/gcb sanitize
echo "gpu-check b rc=$? after $((SECONDS - t0)) s"
grep -v "  passed " /tmp/gca/summary.txt; cat /tmp/gcb/summary.txt
awk '/test_cuda_fast_path_cuda \.\.\./{f=1} f' /tmp/gca/ctest-default.log | head -30
