#!/usr/bin/env bash
# Everything worth checking on a GPU machine, in one command and one time
# budget, every log in OUTDIR and a pass/fail line per stage in
# OUTDIR/summary.txt. Meant for a bare machine without network or apt that has
# nvcc, CMake, ninja and PyTorch (pip), and perhaps compute-sanitizer and ncu:
#
#   scripts/gpu-check.sh OUTDIR [STAGES]
#
# STAGES (comma-separated, default all, in this order):
#   env       versions of the driver, toolkit, tools and PyTorch
#   build     finds cuDNN and NCCL inside PyTorch's pip packages (nvidia-cudnn-*,
#             nvidia-nccl-*) and CMocka (system, $KILN_CMOCKA_ROOT, or the .debs in
#             third_party/debs unpacked with dpkg -x), configures build-gpu/ with
#             -DKILN_CUDA_ARCHITECTURES=90 and the CUDA compiler, and builds it
#   test      the whole CTest suite (ctest --output-on-failure)
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck and initcheck over
#             the test programs of the *_cuda tests, each run time-limited
#   bench     python3 bench/run.py --device cuda, short (1 repeat, 1 epoch)
#   ncu       ncu: kernels and time per kernel of one training step of A and of B
# A stage whose tool is missing is recorded as SKIPPED and the rest go on; a
# stage that fails is recorded as FAILED and the rest go on. The exit status is
# 1 when any stage failed.
#
# Environment:
#   KILN_CHECK_BUDGET   seconds for all stages together (default 540): each stage
#                       gets at most what is left; later stages are then SKIPPED
#   CUDACXX / KILN_CUDA_COMPILER   the CUDA compiler (default: nvcc on PATH, then
#                       /usr/local/cuda/bin/nvcc)
#   KILN_CMOCKA_ROOT    a CMocka prefix (with lib/pkgconfig or usr/lib/*/pkgconfig)
#   KILN_DATA           the Fashion-MNIST directory (default: /usr/share/datasets/
#                       fashion-mnist, then data/fashion-mnist in this tree)
#   KILN_BUILD_DIR      the build directory (default build-gpu; kept between runs,
#                       so a second run rebuilds only what changed)
#   KILN_SANITIZER_TIMEOUT  seconds per compute-sanitizer run (default 60)
#   KILN_SANITIZE_BUDGET    seconds for the whole sanitize stage (default 150)
#   KILN_BENCH_ARGS     arguments for bench/run.py instead of the short defaults
set -uo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$1"
out="$(cd "$1" && pwd)"
stages="${2:-env,build,test,sanitize,bench,ncu}"
build="${KILN_BUILD_DIR:-$root/build-gpu}"
budget="${KILN_CHECK_BUDGET:-540}"
start=$SECONDS
summary="$out/summary.txt"
: >"$summary"
failed=0

log() { echo "gpu-check: $*" | tee -a "$out/gpu-check.log"; }
record() {  # STAGE STATUS DETAIL
  printf '%-28s %-8s %s\n' "$1" "$2" "$3" | tee -a "$summary"
  [[ $2 == FAILED ]] && failed=1
  return 0
}
left() { echo $((budget - (SECONDS - start))); }
limit() {  # SECS [END]: the seconds a step may take: SECS, or less when the
  local l; l=$(left)  # budget (or the stage's END, in $SECONDS) is nearer
  if [[ -n ${2:-} && $(($2 - SECONDS)) -lt $l ]]; then l=$(($2 - SECONDS)); fi
  if [[ $1 -lt $l ]]; then echo "$1"; else echo "$l"; fi
}
wanted() { [[ ",$stages," == *",$1,"* ]]; }
have() { command -v "$1" >/dev/null 2>&1; }
# Runs a command with a time limit, its output in a log; prints PASSED, FAILED,
# TIMEOUT or SKIPPED (exit status 77: the test found no usable device).
timed() {  # SECONDS LOG CMD...
  local secs=$1 logf=$2; shift 2
  if [[ $secs -le 5 ]]; then echo "BUDGET"; return; fi
  timeout -k 10 "$secs" "$@" >"$logf" 2>&1
  local rc=$?
  if [[ $rc -eq 0 ]]; then echo PASSED
  elif [[ $rc -eq 124 || $rc -eq 137 ]]; then echo TIMEOUT
  elif [[ $rc -eq 77 ]]; then echo SKIPPED
  else echo "FAILED(rc=$rc)"; fi
}
status_of() {  # PASSED/FAILED(...)/TIMEOUT/BUDGET -> summary status
  case $1 in
    PASSED) echo passed ;;
    SKIPPED) echo SKIPPED ;;
    BUDGET) echo SKIPPED ;;
    *) echo FAILED ;;
  esac
}

# ---- where things are ---------------------------------------------------------
python=python3  # the one that imports torch, if any does
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import torch' >/dev/null 2>&1; then python=$py; break; fi
done
nvcc="${KILN_CUDA_COMPILER:-${CUDACXX:-}}"
if [[ -z $nvcc ]]; then
  if have nvcc; then nvcc="$(command -v nvcc)"; elif [[ -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc; fi
fi
cuda_bin="$(dirname "${nvcc:-/usr/local/cuda/bin/nvcc}")"
sanitizer="$(command -v compute-sanitizer || ls "$cuda_bin"/compute-sanitizer "$cuda_bin"/../compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)"
ncu="$(command -v ncu || ls "$cuda_bin"/ncu 2>/dev/null | head -1)"
data="${KILN_DATA:-}"
if [[ -z $data ]]; then
  for d in /usr/share/datasets/fashion-mnist "$root/data/fashion-mnist"; do
    if [[ -e $d/train-images-idx3-ubyte.gz || -e $d/train-images-idx3-ubyte ]]; then data=$d; break; fi
  done
fi

# A library inside PyTorch's pip packages (site-packages/nvidia/...): prints
# the folder holding its lib/ (and include/), or nothing.
pip_lib_root() {  # LIBNAME (e.g. libcudnn.so)
  "$python" - "$1" <<'PY' 2>/dev/null
import glob, os, site, sys
dirs = site.getsitepackages() + [site.getusersitepackages()]
try:
    import nvidia
    dirs = list(nvidia.__path__) + dirs
except Exception:
    pass
for d in dirs:
    base = d if os.path.basename(d) == "nvidia" else os.path.join(d, "nvidia")
    hits = sorted(glob.glob(os.path.join(base, "**", sys.argv[1] + "*"), recursive=True))
    if hits:
        print(os.path.dirname(os.path.dirname(hits[0])))
        break
PY
}

# Prepends the folders of the dependencies to the search paths (also used by
# the later stages, so that each stage can run alone).
deps="$out/deps"
setup_deps() {
  mkdir -p "$deps/lib"
  cudnn_root="$(pip_lib_root libcudnn.so)"
  nccl_root="$(pip_lib_root libnccl.so)"
  cublas_root="$(pip_lib_root libcublas.so)"
  extra_rpath=""
  for r in "$cudnn_root" "$nccl_root" "$cublas_root"; do
    [[ -n $r && -d $r/lib ]] || continue
    export LD_LIBRARY_PATH="$r/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    extra_rpath="${extra_rpath:+$extra_rpath;}$r/lib"
    # pip ships only versioned names (libcudnn.so.9): unversioned links to link against
    for f in "$r"/lib/lib*.so.*; do
      [[ -e $f ]] || continue
      local base; base="$(basename "$f")"; base="${base%%.so.*}.so"
      [[ -e $deps/lib/$base ]] || ln -sf "$f" "$deps/lib/$base"
    done
  done
  export LD_LIBRARY_PATH="$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if [[ -n $cudnn_root ]]; then
    # KILN_CUDNN_PATH: the folder holding libcudnn.so.9, which the plugin
    # dlopen()s; CUDNN_PATH: the tree whose include/ the build takes headers from.
    export KILN_CUDNN_PATH="$cudnn_root/lib" CUDNN_PATH="$cudnn_root" CUDNN_ROOT="$cudnn_root"
  fi
  if [[ -n $nccl_root ]]; then
    export NCCL_HOME="$nccl_root"  # where src/distributed/plugin/CMakeLists.txt looks for nccl.h and libnccl
  fi
  # CMocka: the system's, KILN_CMOCKA_ROOT, or the carried .debs.
  cmocka=""
  if pkg-config --exists cmocka 2>/dev/null; then
    cmocka="system"
  else
    local prefix="${KILN_CMOCKA_ROOT:-}"
    if [[ -z $prefix ]] && ls "$root"/third_party/debs/*.deb >/dev/null 2>&1; then
      prefix="$deps/debs"
      mkdir -p "$prefix"
      for deb in "$root"/third_party/debs/*.deb; do dpkg -x "$deb" "$prefix" || log "dpkg -x $deb failed"; done
      # The .pc files name /usr: point them at the unpacked tree.
      find "$prefix" -name '*.pc' -exec sed -i -E "s#(^[A-Za-z_]+=|-L|-I)/usr#\\1$prefix/usr#g" {} +
    fi
    if [[ -n $prefix ]]; then
      for pc in "$prefix"/lib/pkgconfig "$prefix"/usr/lib/*/pkgconfig "$prefix"/usr/lib/pkgconfig "$prefix"/lib/*/pkgconfig; do
        [[ -d $pc ]] && export PKG_CONFIG_PATH="$pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
      done
      for lib in "$prefix"/lib "$prefix"/usr/lib/* "$prefix"/usr/lib; do
        [[ -d $lib ]] && export LD_LIBRARY_PATH="$lib:$LD_LIBRARY_PATH"
      done
      pkg-config --exists cmocka 2>/dev/null && cmocka="$prefix"
    fi
  fi
  export KILN_BACKEND_PATH="$build"
  {
    echo "cudnn: ${cudnn_root:-not found}"
    echo "nccl: ${nccl_root:-not found}"
    echo "cublas (pip): ${cublas_root:-not found}"
    echo "cmocka: ${cmocka:-not found}"
    echo "data: ${data:-not found}"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "PKG_CONFIG_PATH=${PKG_CONFIG_PATH:-}"
  } >"$out/deps.txt"
}
setup_deps
log "output in $out; stages $stages; budget ${budget}s; build dir $build"

# ---- env ------------------------------------------------------------------------
if wanted env; then
  {
    echo "date: $(date -u +%FT%TZ)"; echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null)"
    uname -a; nproc; free -g 2>/dev/null | head -2
    have nvidia-smi && nvidia-smi
    echo "nvcc: ${nvcc:-none}"; [[ -n $nvcc ]] && "$nvcc" --version
    have cmake && cmake --version | head -1; have ninja && echo "ninja $(ninja --version)"
    echo "compute-sanitizer: ${sanitizer:-none}"; echo "ncu: ${ncu:-none}"
    "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
    cat "$out/deps.txt"
  } >"$out/env.log" 2>&1
  record env passed "env.log (cuDNN: ${cudnn_root:-none}, NCCL: ${nccl_root:-none}, CMocka: ${cmocka:-none})"
fi

# ---- build ----------------------------------------------------------------------
if wanted build; then
  if [[ -z $nvcc ]]; then
    record build FAILED "no CUDA compiler (set CUDACXX)"
  else
    tests=ON
    [[ -n $cmocka ]] || { tests=OFF; log "no CMocka: configuring without tests"; }
    r=$(timed "$(limit 90)" "$out/configure.log" cmake -S "$root" -B "$build" -G Ninja --no-warn-unused-cli \
      -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc" -DKILN_CUDA_ARCHITECTURES=90 \
      -DKILN_BUILD_TESTS=$tests "-DKILN_CUDA_EXTRA_RPATH=$extra_rpath" \
      "-DCMAKE_PREFIX_PATH=${cudnn_root:-};${nccl_root:-}" "-DCMAKE_LIBRARY_PATH=$deps/lib")
    record configure "$(status_of "$r")" "$r configure.log (tests $tests)"
    if [[ $r == PASSED ]]; then
      r=$(timed "$(limit 300)" "$out/build.log" cmake --build "$build" -j "$(nproc)")
      record build "$(status_of "$r")" "$r build.log"
    fi
  fi
fi

# ---- test -----------------------------------------------------------------------
if wanted test; then
  if [[ ! -f $build/CTestTestfile.cmake ]]; then
    record ctest SKIPPED "no build in $build"
  elif [[ -z $cmocka ]]; then
    record ctest SKIPPED "no CMocka: tests not built"
  else
    r=$(timed "$(limit 180)" "$out/ctest.log" ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 120)
    detail="$(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1)"
    skipped="$(grep -c 'Not Run\|Skipped' "$out/ctest.log")"
    record ctest "$(status_of "$r")" "$r ctest.log: ${detail:-?} ($skipped lines say skipped)"
  fi
fi

# ---- sanitize -------------------------------------------------------------------
if wanted sanitize; then
  if [[ -z $sanitizer ]]; then
    record sanitize SKIPPED "compute-sanitizer not found"
  elif [[ ! -f $build/CTestTestfile.cmake || -z $cmocka ]]; then
    record sanitize SKIPPED "no test programs in $build"
  else
    programs=$(ctest --test-dir "$build" -N -R '_cuda$' | sed -n -E 's/.*Test +#[0-9]+: (.*)_cuda$/\1/p')
    per="${KILN_SANITIZER_TIMEOUT:-60}"
    stage_end=$((SECONDS + ${KILN_SANITIZE_BUDGET:-150}))  # the whole stage, so bench keeps its time
    for tool in memcheck racecheck synccheck initcheck; do
      for p in $programs; do
        exe="$build/tests/$p"
        [[ -x $exe ]] || { record "sanitize $tool $p" FAILED "no $exe"; continue; }
        extra=()
        [[ $tool == memcheck ]] && extra=(--leak-check full)
        r=$(KILN_TEST_DEVICE=cuda timed "$(limit "$per" "$stage_end")" "$out/sanitize-$tool-$p.log" \
          "$sanitizer" --tool "$tool" --error-exitcode 1 "${extra[@]}" "$exe")
        errs="$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize-$tool-$p.log" 2>/dev/null | tail -1)"
        record "sanitize $tool $p" "$(status_of "$r")" "$r ${errs}"
      done
    done
  fi
fi

# ---- bench ----------------------------------------------------------------------
if wanted bench; then
  if [[ ! -x $build/bench/kiln_bench ]]; then
    record bench SKIPPED "no $build/bench/kiln_bench"
  else
    bl=$(limit 300)
    if [[ -n ${KILN_BENCH_ARGS:-} ]]; then
      read -r -a bargs <<<"$KILN_BENCH_ARGS"
    else
      bargs=(--repeats 1 --epochs 1 --warmup 1 --compile-timeout 90)
      [[ -n $data ]] || bargs+=(--workloads W)
    fi
    r=$(timed "$bl" "$out/bench.log" "$python" "$root/bench/run.py" --device cuda --build-dir "$build" \
      --data "${data:-/nonexistent}" --time-budget $((bl - 15)) --out "$out/bench-cuda.json" "${bargs[@]}")
    record bench "$(status_of "$r")" "$r bench.log, bench-cuda.json (data: ${data:-none, so W only})"
  fi
fi

# ---- ncu ------------------------------------------------------------------------
if wanted ncu; then
  if [[ -z $ncu ]]; then
    record ncu SKIPPED "ncu not found"
  elif [[ ! -x $build/bench/kiln_bench ]]; then
    record ncu SKIPPED "no $build/bench/kiln_bench"
  else
    for w in A B; do
      if [[ $w == A ]]; then spec=784-32-10; batch=128; else spec=784-1024-1024-10; batch=1024; fi
      # One step between cuProfilerStart/Stop (kiln_bench --profile-steps), after warm-up steps.
      r=$(timed "$(limit 120)" "$out/ncu-$w.csv" "$ncu" --profile-from-start off --metrics gpu__time_duration.sum \
        --csv --print-units base "$build/bench/kiln_bench" --workload W --spec $spec --batch $batch \
        --precision fp32 --steps 1 --windows 1 --profile-steps 1 --device cuda)
      if [[ $r == PASSED ]]; then
        "$python" "$root/bench/ncu_summary.py" "$out/ncu-$w.csv" --steps 1 >"$out/ncu-$w-summary.txt" 2>&1 ||
          r="FAILED(summary)"
      fi
      record "ncu $w" "$(status_of "$r")" "$r ncu-$w.csv, ncu-$w-summary.txt: $(head -1 "$out/ncu-$w-summary.txt" 2>/dev/null)"
    done
  fi
fi

log "done in $((SECONDS - start)) s; summary:"
cat "$summary"
exit $failed
