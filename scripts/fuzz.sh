#!/usr/bin/env bash
# Builds kiln's libFuzzer targets with clang (-fsanitize=fuzzer,address,
# undefined, enum and float-cast-overflow; tests/fuzz/CMakeLists.txt) and runs
# every one of them, one at a time under `nice -n 19`, for SECONDS each
# (default 60), with its dictionary and a working copy of its seed corpus.
# Prints per target the executions, the coverage (cov: edges, ft: features),
# the corpus size and the findings, and exits non-zero if anything was found.
#
#   scripts/fuzz.sh [SECONDS]
#
# Environment:
#   KILN_FUZZ_BUILD_DIR  build directory (default build-fuzz)
#   KILN_FUZZ_WORK       corpora, logs and crash files (default $KILN_FUZZ_BUILD_DIR/fuzz-work);
#                        the corpora grow from run to run
#   KILN_FUZZ_TARGETS    the targets to run (default: all of tests/fuzz/CMakeLists.txt's KILN_FUZZ_TARGETS)
#   KILN_FUZZ_RECORD     also write the run's record (date, commit, command, the table) to this file
#
# A finding leaves its input in $KILN_FUZZ_WORK/artifacts/; replay it with
# $KILN_FUZZ_BUILD_DIR/tests/fuzz/fuzz_NAME FILE, fix it, and copy it into
# tests/fuzz/corpus_NAME/regress_WHAT so that CTest replays it from then on.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -gt 0 ]] || { echo "usage: scripts/fuzz.sh [SECONDS]" >&2; exit 2; }
build="${KILN_FUZZ_BUILD_DIR:-$root/build-fuzz}"
work="${KILN_FUZZ_WORK:-$build/fuzz-work}"

# The one list of targets, so a harness added there (the ONNX reader's) runs here too.
all_targets="$(sed -n 's/^set(KILN_FUZZ_TARGETS \(.*\))$/\1/p' "$root/tests/fuzz/CMakeLists.txt")"
[[ -n "$all_targets" ]] || { echo "fuzz.sh: no KILN_FUZZ_TARGETS in tests/fuzz/CMakeLists.txt" >&2; exit 1; }
read -r -a targets <<<"${KILN_FUZZ_TARGETS:-$all_targets}"

command -v clang >/dev/null && command -v clang++ >/dev/null ||
  { echo "fuzz.sh: needs clang and clang++ (Debian: apt-get install clang; CI does not fuzz, so install-deps.sh leaves it out)" >&2; exit 1; }
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_CUDA=OFF \
  -DKILN_BUILD_FUZZ=ON -DKILN_BUILD_TOOLS=OFF -DKILN_BUILD_EXAMPLES=OFF -DKILN_BUILD_BENCH=OFF -DKILN_BUILD_DIST=OFF \
  >/dev/null
build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
nice -n 19 cmake --build "$build" -j "$(nproc)" --target "${build_targets[@]}"

mkdir -p "$work/artifacts"
rows=()
total=0
findings=0
for t in "${targets[@]}"; do
  corpus="$work/corpus_$t"
  mkdir -p "$corpus"
  cp -n "$root/tests/fuzz/corpus_$t"/* "$corpus"/
  log="$work/fuzz_$t.log"
  echo "== fuzz_$t: ${seconds}s"
  before="$(find "$work/artifacts" -maxdepth 1 -name "$t-*" | wc -l)"
  set +e
  # -timeout: an input that takes 10 s is a hang; -rss_limit_mb: a reader
  # that believes a header's sizes allocates gigabytes.
  nice -n 19 "$build/tests/fuzz/fuzz_$t" "$corpus" -dict="$root/tests/fuzz/$t.dict" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$t-" >"$log" 2>&1
  rc=$?
  set -e
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  last="$(grep -E '^#[0-9]+' "$log" | grep 'cov:' | tail -1 || true)"
  cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")"
  ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")"
  files="$(find "$corpus" -maxdepth 1 -type f | wc -l)"
  found=$(($(find "$work/artifacts" -maxdepth 1 -name "$t-*" | wc -l) - before))
  if [[ $rc -ne 0 && $found -eq 0 ]]; then found=1; fi
  if [[ $found -ne 0 ]]; then
    echo "fuzz_$t: FOUND something (exit $rc); see $log and $work/artifacts/"
    grep -E 'ERROR|runtime error|kiln fuzz harness' "$log" | head -5 || true
  fi
  total=$((total + ${execs:-0}))
  findings=$((findings + found))
  rows+=("$(printf '%-12s %14s %8s %8s %8s %9s' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$files" "$found")")
done

table="$(printf '%-12s %14s %8s %8s %8s %9s\n' target executions cov ft corpus findings; printf '%s\n' "${rows[@]}";
  printf '%-12s %14s %36s\n' total "$total" "$findings")"
echo
echo "== fuzz summary (${seconds}s per target)"
echo "$table"
if [[ -n "${KILN_FUZZ_RECORD:-}" ]]; then
  {
    echo "# kiln fuzz run"
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet HEAD -- src include tests/fuzz || echo ' (with local changes)')"
    echo "command: scripts/fuzz.sh $seconds (targets: ${targets[*]})"
    echo "machine: $(nproc) cores, $(clang --version | head -1)"
    echo "sanitizers: -fsanitize=fuzzer,address,undefined,enum,float-cast-overflow -fno-sanitize-recover=all"
    echo "corpus: files in the working corpus at the end (seeds included); cov/ft: libFuzzer's edge and feature counts"
    echo
    echo "$table"
  } >"$KILN_FUZZ_RECORD"
  echo "record written to $KILN_FUZZ_RECORD"
fi
[[ $findings -eq 0 ]] || { echo "fuzz.sh: $findings finding(s)"; exit 1; }
echo "fuzz.sh: no findings"
