#!/usr/bin/env bash
# The ABI check (DESIGN.md: "an ABI baseline is checked so a break cannot
# slip in"): compares the public ABI of a freshly built libkiln.so with the
# committed baseline abi/libkiln.abi, both written by
# scripts/update-abi-baseline.sh with the same options.
#
#   tests/test_abi.sh LIBRARY        (CTest passes $<TARGET_FILE:kiln>)
#
# Passes when nothing changed, or only compatible things: new functions,
# enumerators appended to an enum. Fails, showing abidiff's report, on a
# removed function, a changed signature, a changed struct layout or enum
# value. Exits 77 (skipped) when abigail-tools is not installed.
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 LIBRARY  (the built libkiln.so)" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
baseline="$root/abi/libkiln.abi"
if ! command -v abidiff >/dev/null || ! command -v abidw >/dev/null; then
  echo "SKIP: abidiff/abidw not found (install abigail-tools)"
  exit 77
fi
[[ -f $baseline ]] || { echo "FAIL: no baseline $baseline; run scripts/update-abi-baseline.sh BUILD_DIR" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$root/scripts/update-abi-baseline.sh" -o "$work/current.abi" "$1" >/dev/null

# abidiff's exit status is a bit mask: 1 error, 2 usage error, 4 the ABIs
# differ, 8 an incompatible change (a removed symbol). Added functions are
# left out of the report (--no-added-syms) so they do not set bit 4.
status=0
abidiff --no-added-syms "$baseline" "$work/current.abi" > "$work/report" 2>&1 || status=$?
if (( status & 3 )); then
  cat "$work/report" >&2
  echo "FAIL: abidiff could not compare the ABIs (exit status $status)" >&2
  exit 1
fi
if (( status & 12 )); then
  cat "$work/report"
  echo "FAIL: libkiln's ABI differs from the baseline $baseline (abidiff exit status $status)." >&2
  echo "A published signature never changes (DESIGN.md: add a _v2). If the change is intended and" \
    "compatible (a field appended to a struct_size struct), regenerate the baseline with" \
    "scripts/update-abi-baseline.sh BUILD_DIR and commit it with the header." >&2
  exit 1
fi
echo "PASS: libkiln's ABI is compatible with $baseline"
added=$(abidiff "$baseline" "$work/current.abi" 2>/dev/null | grep -c "^  \[A\] " || true)
if (( added > 0 )); then
  echo "note: $added function(s) added since the baseline; regenerate it (scripts/update-abi-baseline.sh) so they are checked too"
fi
