#!/usr/bin/env bash
# Second device call of 2026-11-27: the fixes of call 1's findings, checked.
# a/: gpu-check build,test-safe,test-default,test (test-safe runs
# test_fashion_mnist, whose Adam case diverged in call 1: the thread pool's
# race, fixed in e1ea5f1); b/: the sanitizer runs call 1 found
# errors in (the 4 minutes left of the session's device time allow no more).
cd "$(dirname "$0")/../../.." || exit 2
mkdir -p "$OUT/a" "$OUT/b"
t0=$SECONDS
KILN_CHECK_BUDGET=${BUDGET_A:-200} KILN_BACKTRACES=1 KILN_CHECK_PACK="$OUT/a" \
  scripts/gpu-check.sh /tmp/gc2a build,test-safe,test-default,test
echo "gpu-check a rc=$?"
export "$(grep "^LD_LIBRARY_PATH=" /tmp/gc2a/deps.txt 2>/dev/null || echo LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
lscpu | grep -E "Model name|^CPU\(s\)" > "$OUT/cpu.txt"
left=$((${BUDGET:-340} - (SECONDS - t0)))
echo "sanitize budget $left s"
KILN_CHECK_BUDGET=$left KILN_SANITIZE_BUDGET=$left KILN_SANITIZER_TIMEOUT=${PER_RUN:-100} KILN_SANITIZE_JOBS=12 \
  KILN_CHECK_PACK="$OUT/b" KILN_SANITIZE_RUNS="initcheck:test_gradients_cuda initcheck:test_program_cache_cuda
  initcheck:test_checkpoint_cuda initcheck:test_fast_path_cuda synccheck:test_fast_path_cuda
  memcheck:test_communicator_cuda ${MORE_RUNS:-}" \
  scripts/gpu-check.sh /tmp/gc2b sanitize
echo "gpu-check b rc=$?"
grep -v "  passed " /tmp/gc2a/summary.txt; grep -v "  passed " /tmp/gc2b/summary.txt | head -40
