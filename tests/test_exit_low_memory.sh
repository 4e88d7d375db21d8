#!/bin/bash
# kiln programs exit promptly under a small address-space limit. OpenBLAS
# (pthread build) used to start worker threads when libkiln was loaded, and
# under `ulimit -v` one retried its 128 MiB buffer allocation forever, so
# even `kiln --version` hung in exit; a product on a thread that cannot map
# that buffer hung the same way. Now libkiln loads OpenBLAS with one thread
# and checks for the buffer first: every run below ends within its timeout,
# with success or a clean out-of-memory error.
#   test_exit_low_memory.sh KILN_CLI
set -u
cli=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/idx_split.sh"
mkdir -p "$work/data"
make_split "$work/data" train 200 1
make_split "$work/data" t10k 50 2
fails=0

# run LIMIT_KB NAME CMD...: CMD under ulimit -v LIMIT_KB ends within 30 s and
# exits 0, or 1 saying it ran out of memory.
run() {
  local limit_kb=$1 name=$2 start rc
  shift 2
  start=$(date +%s%N)
  (ulimit -v "$limit_kb"; exec timeout -s KILL 30 "$@") >"$work/out" 2>&1 </dev/null
  rc=$?
  local ms=$((($(date +%s%N) - start) / 1000000))
  if [ "$rc" -eq 0 ] || { [ "$rc" -eq 1 ] && grep -qi "out of \(host \)\?memory\|out of address space" "$work/out"; }; then
    echo "ok: $name under ulimit -v $limit_kb: exit $rc after ${ms} ms"
  else
    echo "FAIL: $name under ulimit -v $limit_kb: exit $rc after ${ms} ms (137 = killed after 30 s)"
    sed 's/^/  | /' "$work/out" | head -5
    fails=$((fails + 1))
  fi
}

for limit_kb in 60000 120000 150000 190000; do
  run "$limit_kb" "kiln --version" "$cli" --version
done
# 40 MB: too little to map OpenBLAS at all, which is out of memory too, not a
# missing library (a 16-core machine ran out at 150 MB).
for limit_kb in 40000 150000 190000 400000; do
  run "$limit_kb" "kiln train" "$cli" train --data "$work/data" --device cpu --hidden 16 --batch 20 --epochs 1 --quiet
done
# One worker thread per core of a 16-core machine: under 40 MB the threads'
# stacks cannot be mapped, which is out of memory too (the H200 machine's 16
# cores, 2026-11-27).
run 40000 "kiln train --threads 16" "$cli" train --data "$work/data" --device cpu --threads 16 --hidden 16 --batch 20 \
  --epochs 1 --quiet
# Without a limit the same run trains: the check does not refuse what fits.
run unlimited "kiln train" "$cli" train --data "$work/data" --device cpu --hidden 16 --batch 20 --epochs 1 --quiet
grep -q "test accuracy" "$work/out" || { echo "FAIL: the unlimited run printed no test accuracy"; fails=$((fails + 1)); }
exit $fails
