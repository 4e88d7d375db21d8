#!/usr/bin/env bash
# The mutation lane: plants each bug of the curated list (tests/mutants/*.toml,
# described in tests/mutants/README.md) in kiln's sources one at a time,
# rebuilds incrementally (the one object and libkiln.so; everything for a
# header or a plugin's source), runs the tests the entry names and then, if
# they all pass, the rest of the suite, restores the source, and prints the
# survivors. Fails on a survivor, on an entry whose original text no longer
# occurs exactly once in its file (so the list cannot rot silently), and on
# an entry that does not compile.
#
#   scripts/mutation.sh                  the curated list (what CI runs)
#   scripts/mutation.sh --only ID...     those entries
#   scripts/mutation.sh --check          only the original texts, no builds
#   scripts/mutation.sh --generate FILE... [--per-file N] [--seed S]
#                                        a seeded sample of universalmutator's
#                                        mutants of FILEs (pip install
#                                        universalmutator), for a full run
#   ... --json FILE                      the per-mutant results as JSON
#
# It builds in a CPU-only Release tree of its own, $KILN_MUTATION_BUILD_DIR
# (default build-mutation beside the sources; configured and built on the
# first run), so that a header's mutant never recompiles CUDA code and the
# main build is never left mutated. Sources are restored however the run
# ends (Ctrl-C included); do not edit the tree while it runs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KILN_MUTATION_BUILD_DIR:-$root/build-mutation}"
python="${KILN_PYTHON:-python3}"

if [[ " $* " != *" --check "* ]]; then
  if [[ ! -f "$build/CMakeCache.txt" ]]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_CUDA=OFF \
      -DKILN_BUILD_BENCH=OFF -DKILN_BUILD_EXAMPLES=OFF >/dev/null
  fi
  echo "== building $build"
  cmake --build "$build" -j "$(nproc)" >/dev/null
fi
exec "$python" "$root/scripts/mutation.py" --build "$build" "$@"
