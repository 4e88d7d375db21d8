#!/usr/bin/env bash
# Second device call of 2026-11-26 (H100): the --exclude-libs fix, checked.
mkdir -p $OUT
{ ls -la /opt/gcc/bin; for f in /opt/gcc/bin/*; do echo "== $f"; file "$f"; head -c 3000 "$f" | strings | head -40; done; } > $OUT/gxx-wrapper.txt 2>&1
(sleep 262; cp /tmp/gc/summary.txt $OUT/summary-partial.txt; tar czf $OUT/logs-partial.tar.gz -C /tmp gc) >/dev/null 2>&1 & wd=$!
KILN_CHECK_BUDGET=150 KILN_BACKTRACES=1 KILN_CHECK_PACK=$OUT scripts/gpu-check.sh /tmp/gc env,build,test
echo "gpu-check rc=$?"
cat /tmp/gc/summary.txt
export "$(grep "^LD_LIBRARY_PATH=" /tmp/gc/deps.txt)"; export KILN_BACKEND_PATH=$PWD/build-gpu
nm -D --defined-only build-gpu/libkiln.so.1 | grep -c -v " kiln_\|KILN_PRIVATE" > $OUT/foreign-exports.txt
timeout 25 build-gpu/tests/cxx_runtime_test $(grep -o 'KILN_NCCL_LIBRARY:FILEPATH=.*' build-gpu/CMakeCache.txt | cut -d= -f2) > $OUT/cxx-runtime.log 2>&1; echo "cxx_runtime_test rc=$?" >> $OUT/cxx-runtime.log
timeout 40 build-gpu/tools/kiln train --data .gpu-carry/fashion-mnist --device auto --hidden 32 --activation relu --optimizer sgd --lr 0.1 --batch 128 --epochs 5 > $OUT/run.log 2>&1; echo "train rc=$?" >> $OUT/run.log
left=$((250 - SECONDS)); [ $left -gt 20 ] && KILN_DISABLE=all timeout $left ctest --test-dir build-gpu -j16 --timeout 60 -E '^(test_exit_low_memory)$' > $OUT/ctest-safe.log 2>&1; echo "ctest-safe rc=$? (left $left s)" >> $OUT/ctest-safe.log
kill $wd 2>/dev/null
tail -25 $OUT/ctest-safe.log; cat $OUT/cxx-runtime.log; tail -8 $OUT/run.log; cat $OUT/foreign-exports.txt
