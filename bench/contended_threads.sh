#!/usr/bin/env bash
# Training on two CPU threads beside another busy process: workloads A
# (784-32-10) and B (784-1024-1024-10) through kiln_bench, with two libkiln
# builds alternated by LD_LIBRARY_PATH (BEFORE and AFTER: directories that
# hold a libkiln.so.1), on an idle machine, beside `yes` at nice 0 and
# beside `nice -n 19 yes`, and on one thread for reference. Prints one line
# per run: scenario, build, threads, workload, median epoch seconds.
#
#   bench/contended_threads.sh BUILD_DIR BEFORE AFTER [REPEATS]
#
# For src/backend/cpu/step_threading.hpp's choice of threads per step; the
# machine must be otherwise idle (the script adds the busy process itself).
set -euo pipefail
build=$1 before=$2 after=$3 repeats=${4:-3}
bench=$build/bench/kiln_bench
[[ -x $bench ]] || { echo "contended_threads.sh: $bench not found" >&2; exit 1; }
for lib in "$before" "$after"; do
  [[ -e $lib/libkiln.so.1 ]] || { echo "contended_threads.sh: no libkiln.so.1 in $lib" >&2; exit 1; }
done

median_epoch() {  # LIB THREADS WORKLOAD EPOCHS
  LD_LIBRARY_PATH=$1 "$bench" --workload "$3" --epochs "$4" --threads "$2" |
    sed -n 's/.*"median_epoch_seconds": \([0-9.]*\).*/\1/p'
}

busy=""
stop_busy() { [[ -n $busy ]] && kill "$busy" 2>/dev/null; busy=""; }
trap stop_busy EXIT

grep -o 'avx512[a-z_0-9]*\|avx2\|fma' /proc/cpuinfo | sort -u | tr '\n' ' ' | sed 's/^/cpu: /'
echo "($(nproc) cores)"
for scenario in idle busy busy-nice19; do
  case $scenario in
    busy) yes >/dev/null & busy=$! ;;
    busy-nice19) nice -n 19 yes >/dev/null & busy=$! ;;
  esac
  sleep 0.5
  for workload in A B; do
    epochs=5
    [[ $workload == B ]] && epochs=2
    echo "$scenario one-thread 1 $workload $(median_epoch "$after" 1 $workload $epochs)"
    for ((r = 0; r < repeats; ++r)); do
      echo "$scenario before 2 $workload $(median_epoch "$before" 2 $workload $epochs)"
      echo "$scenario after 2 $workload $(median_epoch "$after" 2 $workload $epochs)"
    done
  done
  stop_busy
done
