#!/usr/bin/env bash
# Every test: installs what is missing, builds everything (Release; with the
# CUDA plugin when nvcc exists), runs the C tests with CTest (tests that need
# a GPU report "skipped" without one), then the bindings' tests through
# bindings/test.sh. Runs every suite even after one
# fails, prints a summary and exits non-zero if any step failed.
#
#   scripts/test.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KILN_BUILD_DIR:-$root/build}"

"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"

results=()
failed=0

echo "== C tests (ctest)"
if ctest --test-dir "$build" --output-on-failure -j "$(nproc)"; then
  results+=("C tests (ctest): passed")
else
  results+=("C tests (ctest): FAILED")
  failed=1
fi

echo "== binding tests (bindings/test.sh)"
if KILN_BUILD_DIR="$build" bash "$root/bindings/test.sh"; then
  results+=("binding tests: passed")
else
  results+=("binding tests: FAILED")
  failed=1
fi

echo
echo "== summary"
printf '  %s\n' "${results[@]}"
if [[ $failed -ne 0 ]]; then
  echo "test.sh: FAILED"
  exit 1
fi
echo "test.sh: all passed"
