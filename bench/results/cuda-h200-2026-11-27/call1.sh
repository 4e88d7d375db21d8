#!/usr/bin/env bash
# First device call of 2026-11-27: the whole flow (gpu-check's default stages,
# sanitizers in parallel), then the main job's command on cuda:0 through
# `auto`, and the device checks of the CLI: no visible device, cuda:1.
cd "$(dirname "$0")/../../.." || exit 2
mkdir -p "$OUT"
KILN_CHECK_BUDGET=${BUDGET:-450} KILN_SANITIZE_BUDGET=400 KILN_SANITIZER_TIMEOUT=30 KILN_SANITIZE_JOBS=8 \
  KILN_BACKTRACES=1 KILN_CHECK_PACK="$OUT" scripts/gpu-check.sh /tmp/gc
echo "gpu-check rc=$?"
export "$(grep "^LD_LIBRARY_PATH=" /tmp/gc/deps.txt 2>/dev/null || echo LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
b=build-gpu
{
  echo "== kiln devices"; timeout 20 $b/tools/kiln devices; echo "rc=$?"
  echo "== CUDA_VISIBLE_DEVICES= kiln devices"; CUDA_VISIBLE_DEVICES= timeout 20 $b/tools/kiln devices; echo "rc=$?"
  echo "== kiln train --device cuda:1 (one GPU)"; timeout 20 $b/tools/kiln train --data .gpu-carry/fashion-mnist --device cuda:1 --epochs 1; echo "rc=$?"
  echo "== CUDA_VISIBLE_DEVICES= kiln train --device auto, 1 epoch"; CUDA_VISIBLE_DEVICES= timeout 60 $b/tools/kiln train --data .gpu-carry/fashion-mnist --device auto --epochs 1; echo "rc=$?"
  echo "== the main job (scripts/run.sh's kiln train, on the built tree)"
  timeout 40 $b/tools/kiln train --data .gpu-carry/fashion-mnist --device auto --hidden 32 --activation relu \
    --optimizer sgd --lr 0.1 --batch 128 --epochs 5; echo "rc=$?"
} > "$OUT/run.log" 2>&1
cp /tmp/gc/summary.txt "$OUT/summary.txt"; tar czf "$OUT/logs.tar.gz" -C /tmp gc
grep -v "passed" /tmp/gc/summary.txt | head -60; tail -30 "$OUT/run.log"
