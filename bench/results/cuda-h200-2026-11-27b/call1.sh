#!/usr/bin/env bash
# The device call of the fourth GPU session (2026-11-27), on main:
#  a/  gpu-check env,build,test-safe,test-default,test: the whole suite with
#      the fast path off, then the GPU tests with the default fast path and
#      with cuDNN on (f191164 and 2156b5c, written after the last call, were
#      never checked there);
#  run.log  the CLI's device checks and the main job's `kiln train` on cuda:0;
#  b/  the sanitizer runs that timed out at 30 s in the third session's first
#      call, all at once, with every second left (racecheck and synccheck now
#      over kiln's own kernels, memcheck and initcheck over every kernel).
cd "$(dirname "$0")/../../.." || exit 2
mkdir -p "$OUT/a" "$OUT/b"
t0=$SECONDS
KILN_CHECK_BUDGET=${BUDGET_A:-240} KILN_BACKTRACES=1 KILN_CHECK_PACK="$OUT/a" \
  scripts/gpu-check.sh /tmp/gca env,build,test-safe,test-default,test
echo "gpu-check a rc=$? after $((SECONDS - t0)) s"
export "$(grep "^LD_LIBRARY_PATH=" /tmp/gca/deps.txt 2>/dev/null || echo LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
b=build-gpu d=.gpu-carry/fashion-mnist
{
  git log -1 --format="commit %H %s" 2>/dev/null; nvidia-smi -L; lscpu | grep -E "Model name|^CPU\(s\)"
  echo "== kiln devices"; timeout 20 $b/tools/kiln devices; echo "rc=$?"
  echo "== CUDA_VISIBLE_DEVICES= kiln devices"; CUDA_VISIBLE_DEVICES= timeout 20 $b/tools/kiln devices; echo "rc=$?"
  echo "== kiln train --device cuda:1 (one GPU)"; timeout 20 $b/tools/kiln train --data $d --device cuda:1 --epochs 1; echo "rc=$?"
  echo "== CUDA_VISIBLE_DEVICES= kiln train --device auto, 1 epoch"
  CUDA_VISIBLE_DEVICES= timeout 30 $b/tools/kiln train --data $d --device auto --epochs 1; echo "rc=$?"
  echo "== the main job (scripts/run.sh's kiln train, on the built tree)"
  timeout 40 $b/tools/kiln train --data $d --device auto --hidden 32 --activation relu \
    --optimizer sgd --lr 0.1 --batch 128 --epochs 5; echo "rc=$?"
} > "$OUT/run.log" 2>&1
left=$((${BUDGET:-555} - (SECONDS - t0)))
echo "sanitize: $left s left"
runs=""
for t in backend_test_cuda test_cuda_fast_path_cuda test_fashion_mnist_cuda test_precision_cuda test_trainer_cuda; do
  for tool in memcheck racecheck synccheck initcheck; do runs+=" $tool:$t"; done
done
runs+=" memcheck:test_ops_cuda racecheck:test_ops_cuda initcheck:test_ops_cuda racecheck:inference_test_cuda"
runs+=" racecheck:test_checkpoint_cuda racecheck:test_fast_path_cuda"
KILN_CHECK_BUDGET=$left KILN_SANITIZE_BUDGET=$((left - 15)) KILN_SANITIZER_TIMEOUT=$left KILN_SANITIZE_JOBS=26 \
  KILN_CHECK_PACK="$OUT/b" KILN_SANITIZE_RUNS="$runs" scripts/gpu-check.sh /tmp/gcb sanitize
echo "gpu-check b rc=$? after $((SECONDS - t0)) s"
grep -v "  passed " /tmp/gca/summary.txt; grep -v "  passed " /tmp/gcb/summary.txt | head -40; tail -25 "$OUT/run.log"
