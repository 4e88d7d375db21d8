#!/bin/bash
# A kiln program exits promptly under a small address-space limit: with the
# pthread OpenBLAS, worker threads started at load time spun forever at exit
# when an allocation failed. Also checks that libkiln resolves OpenBLAS to
# the serial variant when that is installed.
#   test_exit_low_memory.sh KILN_CLI LIBKILN
set -u
cli=$1 lib=$2
fails=0
serial_dir=/usr/lib/$(gcc -print-multiarch 2>/dev/null)/openblas-serial
if [ -e "$serial_dir/libopenblas.so.0" ]; then
  resolved=$(ldd "$lib" | awk '/libopenblas/ {print $3}')
  case $resolved in
    "$serial_dir"/*) ;;
    *) echo "FAIL: libkiln loads $resolved, not the serial OpenBLAS in $serial_dir"; fails=1 ;;
  esac
fi
for limit_kb in 60000 120000 190000; do
  start=$(date +%s)
  (ulimit -v "$limit_kb"; exec timeout 30 "$cli" --version) >/dev/null 2>&1
  rc=$?
  if [ "$rc" -eq 124 ]; then
    echo "FAIL: kiln --version under ulimit -v $limit_kb did not exit within 30 s"
    fails=$((fails + 1))
  else
    echo "ok: ulimit -v $limit_kb: exit $rc after $(( $(date +%s) - start )) s"
  fi
done
exit $fails
