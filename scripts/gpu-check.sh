#!/usr/bin/env bash
# Everything worth checking on a GPU machine, in staged commands that each
# fit one call of the device tool (10 minutes), every log in OUTDIR and a
# line per stage in OUTDIR/summary.txt. Meant for a bare machine without
# network, apt or dpkg that has nvcc, CMake, ninja and Python, perhaps with
# PyTorch's pip packages, compute-sanitizer and ncu; what else it lacks comes
# from the carried directory (scripts/gpu-carry.sh). src/backend/cuda/README.md
# gives the exact commands, in order, and what must travel with them.
#
#   scripts/gpu-check.sh OUTDIR [STAGES]
#
# STAGES (comma-separated, run in the order given; default
# env,build,test-safe,test-default,test,bench,ncu,sanitize: the figures before the
# sanitizers, which take whatever time is left):
#   env        versions of the driver, toolkit, tools and PyTorch, and every
#              dependency: what was found, and what the flow falls back to;
#              and whether PyTorch's own cuDNN, NCCL and NVML work on this
#              GPU (scripts/gpu-stack-check.py)
#   build      configures build-gpu/ (-DKILN_CUDA_ARCHITECTURES=90, the CUDA
#              compiler, cuDNN and NCCL from the toolkit or PyTorch's pip
#              packages, the carried packages where the image has none) and
#              builds it
#   test-safe  the whole CTest suite with the fast path's riskiest parts off
#              (KILN_DISABLE=all: no CUDA graphs, cuBLASLt epilogues or cuDNN)
#   test-default  the GPU tests (*_cuda, *_cudnn) with the default fast path
#              (CUDA graphs and cuBLASLt epilogues on, cuDNN off)
#   test       the GPU tests with every part on
#              (KILN_ENABLE=cudnn: cuDNN is off by default)
#              After test-safe, test-default or test, each test program that crashed runs
#              once more under cuda-gdb (where there is one), with the
#              stage's environment: its backtrace goes in
#              backtrace-STAGE-TEST.log and the first frames in the summary.
#   sanitize   first a planted bug per tool (tests/sanitizer_canary.cu), which
#              must be reported, so a clean run below means clean code and not
#              a sanitizer that cannot work here; then compute-sanitizer
#              memcheck, racecheck, synccheck and initcheck over the test
#              programs of the *_cuda tests (racecheck and synccheck over
#              kiln's own kernels, where the tool has --kernel-name; memcheck
#              and initcheck over every kernel), each run time-limited,
#              KILN_SANITIZE_JOBS of them at once, test by test (every tool
#              on a test before the next test); each log's reports sorted
#              by scripts/sanitizer_verdict.py: API errors raised and handled
#              inside other libraries (NCCL) and deliberate out-of-memory
#              are not findings, a tool that lost track is UNSURE; a run
#              cut short by its limit is TIMEOUT with what it reported
#              before, FAILED when that holds a finding of kiln's
#   bench      python3 bench/run.py --device cuda, short (1 repeat, 1 warm-up
#              and 1 timed epoch, PyTorch eager and graphed)
#   ncu        ncu: kernels and time per kernel of one training step of A (also with
#              the narrow step), B (fp32 and tf32) and W (bf16)
# A stage whose tool is missing is SKIPPED, one that runs out of time TIMEOUT,
# one that fails FAILED; the rest go on either way. Exit status: 1 when a
# stage FAILED, else 3 when one timed out or was UNSURE, else 0.
#
# Environment:
#   KILN_CHECK_BUDGET   seconds for all stages together (default 540): each stage
#                       gets at most what is left; later stages are then SKIPPED
#   KILN_CHECK_PACK     a directory (the device tool's $OUT) that receives
#                       summary.txt and logs.tar.gz of OUTDIR after each stage
#                       and at the end: the tool brings back at most 8 files
#   KILN_CARRY          the carried directory (default .gpu-carry in this tree):
#                       debs/ and fashion-mnist/ (scripts/gpu-carry.sh)
#   CUDACXX / KILN_CUDA_COMPILER   the CUDA compiler (default: nvcc on PATH, then
#                       /usr/local/cuda/bin/nvcc)
#   KILN_DATA           the Fashion-MNIST directory (default: the carried copy,
#                       /usr/share/datasets/fashion-mnist, data/fashion-mnist)
#   KILN_BUILD_DIR      the build directory (default build-gpu; kept between runs,
#                       so a later stage's build only rebuilds what changed)
#   KILN_SANITIZER_TIMEOUT  seconds per compute-sanitizer run (default 60)
#   KILN_BACKTRACES     crashed tests per stage rerun under cuda-gdb (default 2)
#   KILN_SANITIZE_BUDGET    seconds for the whole sanitize stage (default 420)
#   KILN_SANITIZE_JOBS      compute-sanitizer runs at once (default: a third of the cores)
#   KILN_SANITIZE_RUNS      instead of every tool on every *_cuda test: these, in
#                       this order, space-separated, each TOOL:TEST or TEST (all four
#                       tools), e.g. "initcheck:test_trainer_cuda test_ops_cuda"
#   KILN_BENCH_ARGS     arguments for bench/run.py instead of the short defaults
set -uo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$1"
out="$(cd "$1" && pwd)"
stages="${2:-env,build,test-safe,test-default,test,bench,ncu,sanitize}"
for s in ${stages//,/ }; do
  case $s in env | build | test-safe | test-default | test | sanitize | bench | ncu) ;;
    *) echo "gpu-check: unknown stage '$s' (env, build, test-safe, test-default, test, sanitize, bench, ncu)" >&2; exit 2 ;;
  esac
done
build="${KILN_BUILD_DIR:-$root/build-gpu}"
carry="${KILN_CARRY:-$root/.gpu-carry}"
budget="${KILN_CHECK_BUDGET:-540}"
start=$SECONDS
summary="$out/summary.txt"
: >"$summary"
failed=0
timedout=0

log() { echo "gpu-check: $*" | tee -a "$out/gpu-check.log"; }
record() {  # STAGE STATUS DETAIL
  printf '%-32s %-8s %s\n' "$1" "$2" "$3" | tee -a "$summary"
  [[ $2 == FAILED ]] && failed=1
  [[ $2 == TIMEOUT || $2 == UNSURE ]] && timedout=1
  return 0
}
left() { echo $((budget - (SECONDS - start))); }
limit() {  # SECS [END]: the seconds a step may take: SECS, or less when the
  local l; l=$(left)  # budget (or the stage's END, in $SECONDS) is nearer
  if [[ -n ${2:-} && $(($2 - SECONDS)) -lt $l ]]; then l=$(($2 - SECONDS)); fi
  if [[ $1 -lt $l ]]; then echo "$1"; else echo "$l"; fi
}
have() { command -v "$1" >/dev/null 2>&1; }
# Runs a command with a time limit, its output in a log; prints PASSED,
# FAILED(rc=N), TIMEOUT, SKIPPED (exit status 77: no usable device) or
# BUDGET (no time was left to start it).
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
status_of() {  # what timed printed -> the summary's status
  case $1 in
    PASSED) echo passed ;;
    SKIPPED | BUDGET) echo SKIPPED ;;
    TIMEOUT) echo TIMEOUT ;;
    *) echo FAILED ;;
  esac
}
pack() {  # the logs for the device tool, which brings back at most 8 files
  [[ -n ${KILN_CHECK_PACK:-} ]] || return 0
  mkdir -p "$KILN_CHECK_PACK"
  cp "$summary" "$KILN_CHECK_PACK/summary.txt"
  tar czf "$KILN_CHECK_PACK/logs.tar.gz" -C "$(dirname "$out")" "$(basename "$out")" 2>/dev/null
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
cuda_gdb="$(command -v cuda-gdb || ls "$cuda_bin"/cuda-gdb 2>/dev/null | head -1)"
cxx="${CXX:-$(command -v c++ || command -v g++)}"
data="${KILN_DATA:-}"
if [[ -z $data ]]; then
  for d in "$carry/fashion-mnist" /usr/share/datasets/fashion-mnist "$root/data/fashion-mnist"; do
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
header_found() { printf '#include <%s>\n' "$1" | "$cxx" -E -x c++ - >/dev/null 2>&1; }
library_loads() { "$python" -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$1" >/dev/null 2>&1; }

# Every dependency: found on the machine, or what the flow does instead
# (unpack a carried package into $deps, build without it). One line each in
# deps.txt, which the env stage prints. Also sets the search paths the later
# stages use, so each stage can run alone.
deps="$out/deps"
report=()
found() { report+=("$(printf '%-26s %s' "$1:" "$2")"); }
unpack_carried() {  # WHAT PACKAGE...: unpacks the carried packages into $deps
  local what=$1 debs=() p; shift
  for p in "$@"; do
    local f; f=$(compgen -G "$carry/debs/${p}_*.deb" | head -1)
    if [[ -z $f ]]; then found "$what" "MISSING, and $p is not carried ($carry/debs): run scripts/gpu-carry.sh"; return 1; fi
    debs+=("$f")
  done
  "$python" "$root/scripts/unpack-deb.py" "$deps" "${debs[@]}" >>"$out/unpack.log" 2>&1 ||
    { found "$what" "MISSING: unpacking the carried $* failed (unpack.log)"; return 1; }
  found "$what" "not on this machine: the carried $* (unpacked into deps/)"
}
setup_deps() {
  mkdir -p "$deps/lib"
  local arch_lib="$deps/usr/lib/x86_64-linux-gnu"
  export LD_LIBRARY_PATH="$arch_lib:$arch_lib/openblas-pthread:$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  prefix_path="$deps/usr"
  found "C/C++ compiler" "${cxx:-MISSING} ($("${cxx:-false}" --version 2>/dev/null | head -1))"
  found "CUDA compiler" "${nvcc:-MISSING}"
  found "cmake" "$(command -v cmake || echo MISSING) ($(cmake --version 2>/dev/null | head -1))"
  found "ninja" "$(command -v ninja || echo MISSING) ($(ninja --version 2>/dev/null))"
  found "python3" "$(command -v "$python") ($("$python" --version 2>&1); torch: $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none))"
  if have pkg-config; then found "pkg-config" "$(command -v pkg-config)"
  else found "pkg-config" "not on this machine: not needed (cmake/KilnDependencies.cmake finds everything without it)"; fi
  if have dpkg; then found "dpkg" "$(command -v dpkg) (not used)"
  else found "dpkg" "not on this machine: not needed (scripts/unpack-deb.py unpacks the carried packages)"; fi
  if header_found zlib.h; then found "zlib headers" "on this machine"
  else unpack_carried "zlib headers" zlib1g-dev; fi
  if library_loads libz.so.1; then found "zlib library" "libz.so.1 on this machine"
  else found "zlib library" "MISSING: libz.so.1 does not load"; fi
  if header_found cmocka.h && library_loads libcmocka.so.0; then found "CMocka" "on this machine"
  else unpack_carried "CMocka" libcmocka-dev libcmocka0; fi
  if library_loads libopenblas.so.0; then found "OpenBLAS" "libopenblas.so.0 on this machine"
  else
    local runtime=(libopenblas0-pthread)
    library_loads libgfortran.so.5 || runtime+=(libgfortran5)
    library_loads libquadmath.so.0 || runtime+=(libquadmath0)
    unpack_carried "OpenBLAS" "${runtime[@]}"
  fi
  if have mpicc || have mpirun; then found "MPI" "$(command -v mpirun || command -v mpicc)"
  else found "MPI" "not on this machine: libkiln_dist.so is built with NCCL only and the mpirun tests are not registered"; fi
  # cuDNN and NCCL: the toolkit's, else PyTorch's pip packages.
  local toolkit_include; toolkit_include="$(dirname "$cuda_bin")/include"
  cudnn_root="" nccl_root="" extra_rpath=""
  if [[ -e $toolkit_include/cudnn_graph.h ]]; then found "cuDNN" "in the toolkit ($toolkit_include)"
  else
    cudnn_root="$(pip_lib_root libcudnn.so)"
    if [[ -n $cudnn_root ]]; then found "cuDNN" "pip: $cudnn_root"
    else found "cuDNN" "MISSING: neither the toolkit nor a pip nvidia-cudnn-* has it"; fi
  fi
  if [[ -e $toolkit_include/nccl.h ]]; then found "NCCL" "in the toolkit ($toolkit_include)"
  else
    nccl_root="$(pip_lib_root libnccl.so)"
    if [[ -n $nccl_root ]]; then found "NCCL" "pip: $nccl_root"
    else found "NCCL" "not found: libkiln_dist.so runs without NCCL (and without MPI is not built)"; fi
  fi
  local cublas_root; cublas_root="$(pip_lib_root libcublas.so)"
  found "cuBLAS (pip)" "${cublas_root:-none: the one of the toolkit}"
  for r in "$cudnn_root" "$nccl_root" "$cublas_root"; do
    [[ -n $r && -d $r/lib ]] || continue
    export LD_LIBRARY_PATH="$r/lib:$LD_LIBRARY_PATH"
    extra_rpath="${extra_rpath:+$extra_rpath;}$r/lib"
    prefix_path="$prefix_path;$r"
    # pip ships only versioned names (libcudnn.so.9): unversioned links to link against
    for f in "$r"/lib/lib*.so.*; do
      [[ -e $f ]] || continue
      local base; base="$(basename "$f")"; base="${base%%.so.*}.so"
      [[ -e $deps/lib/$base ]] || ln -sf "$f" "$deps/lib/$base"
    done
  done
  if [[ -n $cudnn_root ]]; then
    # KILN_CUDNN_PATH: the folder holding libcudnn.so.9, which the plugin
    # dlopen()s; CUDNN_PATH: the tree whose include/ the build takes headers from.
    export KILN_CUDNN_PATH="$cudnn_root/lib" CUDNN_PATH="$cudnn_root" CUDNN_ROOT="$cudnn_root"
  fi
  [[ -n $nccl_root ]] && export NCCL_HOME="$nccl_root"  # src/distributed/plugin/CMakeLists.txt looks there
  found "Fashion-MNIST" "${data:-not found: bench runs workload W only}"
  found "compute-sanitizer" "${sanitizer:-not found: the sanitize stage is skipped}"
  found "ncu" "${ncu:-not found: the ncu stage is skipped}"
  found "cuda-gdb" "${cuda_gdb:-not found: crashed tests get no backtrace}"
  export KILN_BACKEND_PATH="$build"
  [[ -n $data ]] && export KILN_FASHION_MNIST="$data"
  {
    printf '%s\n' "${report[@]}"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "CMAKE_PREFIX_PATH=$prefix_path"
  } >"$out/deps.txt"
}
setup_deps
log "output in $out; stages $stages; budget ${budget}s; build dir $build; carried: $carry"

# ---- env ------------------------------------------------------------------------
stage_env() {
  {
    echo "date: $(date -u +%FT%TZ)"; echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null)"
    uname -a; nproc; free -g 2>/dev/null | head -2
    have nvidia-smi && nvidia-smi
    echo "nvcc: ${nvcc:-none}"; [[ -n $nvcc ]] && "$nvcc" --version
    "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
    echo "== dependencies: found, or what the flow does instead"
    cat "$out/deps.txt"
  } >"$out/env.log" 2>&1
  sed -n '/^== dependencies/,$p' "$out/env.log"
  # The machine's own cuDNN, NCCL and NVML, through PyTorch: on the H200
  # kiln's every use of cuDNN and NCCL crashed, and this tells whose fault.
  r=$(timed "$(limit 120)" "$out/env-stack.log" "$python" "$root/scripts/gpu-stack-check.py")
  record "env gpu stack" "$(status_of "$r")" "$r env-stack.log: $(cut -c1-90 "$out/env-stack.log" | tr '\n' ';')"
  if grep -q "MISSING" "$out/deps.txt"; then
    record env FAILED "env.log: $(grep -c MISSING "$out/deps.txt") dependencies MISSING ($(grep MISSING "$out/deps.txt" | cut -d: -f1 | tr '\n' ' '))"
  else
    record env passed "env.log (every dependency found or carried)"
  fi
}

# ---- build ----------------------------------------------------------------------
stage_build() {
  if [[ -z $nvcc ]]; then
    record build FAILED "no CUDA compiler (set CUDACXX)"
  else
    r=$(timed "$(limit 300)" "$out/configure.log" cmake -S "$root" -B "$build" -G Ninja --no-warn-unused-cli \
      -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc" -DKILN_CUDA_ARCHITECTURES=90 \
      "-DKILN_CUDA_EXTRA_RPATH=$extra_rpath" "-DCMAKE_PREFIX_PATH=$prefix_path" "-DCMAKE_LIBRARY_PATH=$deps/lib")
    record configure "$(status_of "$r")" "$r configure.log"
    if [[ $r == PASSED ]]; then
      r=$(timed "$(limit 3600)" "$out/build.log" cmake --build "$build" -j "$(nproc)")
      record build "$(status_of "$r")" "$r build.log"
    fi
  fi
}

# The tests that are one program of this build (not mpirun jobs or scripts),
# each as CTest runs it, its arguments and environment, in a script
# $out/tests/NAME.sh that runs it under the command its arguments give
# (compute-sanitizer --tool X, cuda-gdb -batch ... --args).
test_scripts() {
  [[ -d $out/tests ]] && return
  mkdir -p "$out/tests"
  ctest --test-dir "$build" --show-only=json-v1 2>/dev/null | "$python" -c '
import json, os, shlex, sys
build, where = sys.argv[1], sys.argv[2]
for t in json.load(sys.stdin)["tests"]:
    cmd = t.get("command") or []
    if not cmd or not cmd[0].startswith(build + "/") or not os.access(cmd[0], os.X_OK):
        continue
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    env = [e for e in props.get("ENVIRONMENT", [])]
    with open(os.path.join(where, t["name"] + ".sh"), "w") as f:
        f.write("cd %s && exec env %s \"$@\" %s\n" % (
            shlex.quote(props.get("WORKING_DIRECTORY", build)), " ".join(shlex.quote(e) for e in env),
            " ".join(shlex.quote(c) for c in cmd)))
' "$build" "$out/tests"
}

# The tests of a CTest log that crashed (a signal: SegFault, "Segmentation
# fault" from CMocka's handler, Child aborted), one name a line.
crashed_tests() {  # LOG
  "$python" - "$1" <<'PY'
import re, sys
name = None
crashed = []
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s*\d+/\d+ Test\s+#\d+: (\S+) \.+", line)
    if m:
        name = m.group(1)
        if re.search(r"Exception|SegFault|Child aborted", line):
            crashed.append(name)
    elif name and re.search(r"Segmentation fault|Aborted|Bus error|Illegal instruction", line) and name not in crashed:
        crashed.append(name)
print("\n".join(crashed))
PY
}

# Each crashed test of a stage once more under cuda-gdb: where it stopped.
backtraces() {  # STAGE LOG ENV...
  local stage=$1 logf=$2; shift 2
  [[ -n $cuda_gdb ]] || return 0
  test_scripts
  local t n=0
  for t in $(crashed_tests "$out/$logf"); do
    [[ -e $out/tests/$t.sh ]] || continue  # an mpirun job or a script
    # a few: crashes of one cause repeat, and each costs a CUDA start-up under the debugger
    [[ $((n++)) -lt ${KILN_BACKTRACES:-2} ]] || break
    local bt="backtrace-$stage-$t.log"
    # with cuDNN's API log and NCCL's INFO lines: the last call before the crash
    r=$(timed "$(limit 60)" "$out/$bt" env "$@" CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=stderr NCCL_DEBUG=INFO \
      bash "$out/tests/$t.sh" "$cuda_gdb" -q -batch \
      -ex "set pagination off" -ex run -ex "bt 30" -ex "info registers rip" --args)
    local st; st="$(status_of "$r")"; [[ $st == passed ]] && st=taken
    record "backtrace $stage $t" "$st" "$bt: $(grep -m4 -E '^#[0-9]' "$out/$bt" | cut -c1-110 | tr '\n' ' ')"
  done
}

# A CTest run of the build: ctest_stage NAME LOG ENV... -- CTEST_ARGS...
ctest_stage() {
  local name=$1 logf=$2; shift 2
  local env=()
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  if [[ ! -f $build/CTestTestfile.cmake ]]; then record "$name" SKIPPED "no build in $build"; return; fi
  r=$(timed "$(limit 3600)" "$out/$logf" env "${env[@]}" ctest --test-dir "$build" --output-on-failure -j "$(nproc)" \
    --timeout 300 "$@")
  local detail skipped
  detail="$(grep -E 'tests passed|tests failed' "$out/$logf" | tail -1)"
  skipped="$(grep -cE '\(Skipped\)|Not Run' "$out/$logf")"
  record "$name" "$(status_of "$r")" "$r $logf: ${detail:-?} ($skipped skipped)"
  [[ $r == PASSED ]] || backtraces "$name" "$logf" "${env[@]}"
}

# ---- test-safe, test-default, test ----------------------------------------------------
stage_test_safe() { ctest_stage test-safe ctest-safe.log KILN_DISABLE=all --; }
# The default fast path whatever the caller's environment: empty lists
# enable and disable nothing (core/program.cpp, fast_path_with_env).
stage_test_default() { ctest_stage test-default ctest-default.log KILN_ENABLE= KILN_DISABLE= -- -R '_cuda|_cudnn'; }
stage_test() { ctest_stage test ctest.log KILN_ENABLE=cudnn -- -R '_cuda|_cudnn'; }

# ---- sanitize -------------------------------------------------------------------
stage_sanitize() {
  canary="$build/tests/sanitizer_canary"
  if [[ -z $sanitizer ]]; then
    record sanitize SKIPPED "compute-sanitizer not found"
  elif [[ ! -f $build/CTestTestfile.cmake || ! -x $canary ]]; then
    record sanitize SKIPPED "no test programs in $build"
  else
    stage_end=$((SECONDS + ${KILN_SANITIZE_BUDGET:-420}))  # the whole stage, so later stages keep their time
    per="${KILN_SANITIZER_TIMEOUT:-60}"
    # racecheck and synccheck look inside a kernel (its shared memory, its
    # barriers): kiln's own kernels are kiln's to check, cuBLAS's and
    # cuDNN's their vendors', and instrumenting those made the long test
    # programs time out (H200, 2026-11-27). What kiln hands the libraries
    # (sizes, leading dimensions, buffers) memcheck and initcheck check over
    # every kernel. The canary's kernels are named like kiln's, so a
    # reported race shows the filter lets kiln's kernels through.
    local own_only=()
    if "$sanitizer" --help 2>&1 | grep -q -- '--kernel-name'; then own_only=(--kernel-name kns=kiln); fi
    own_kernels() { [[ ${#own_only[@]} -gt 0 && ($1 == racecheck || $1 == synccheck) ]]; }
    # The canaries: each tool must report its planted bug.
    for pair in memcheck:oob:"Invalid __global__ write" racecheck:race:"Race reported\|hazard" \
      initcheck:uninit:"Uninitialized __global__ memory read"; do
      tool=${pair%%:*} rest=${pair#*:}; mode=${rest%%:*} want=${rest#*:}
      filter=(); own_kernels "$tool" && filter=("${own_only[@]}")
      r=$(timed "$(limit "$per" "$stage_end")" "$out/sanitize-canary-$tool.log" \
        "$sanitizer" --tool "$tool" --error-exitcode 1 "${filter[@]}" "$canary" "$mode")
      if [[ $r == "FAILED(rc=1)" ]] && grep -q "$want" "$out/sanitize-canary-$tool.log"; then
        record "sanitize canary $tool" passed "the planted bug ($mode) was reported: $tool works here"
      elif [[ $r == SKIPPED || $r == BUDGET || $r == TIMEOUT ]]; then
        record "sanitize canary $tool" "$(status_of "$r")" "$r sanitize-canary-$tool.log"
      else
        record "sanitize canary $tool" FAILED "$r: the planted bug ($mode) was NOT reported: $tool cannot be trusted here"
      fi
    done
    test_scripts
    local entries=() runs=() run entry
    if [[ -n ${KILN_SANITIZE_RUNS:-} ]]; then
      for entry in $KILN_SANITIZE_RUNS; do entries+=("$entry"); done
    else
      for script in "$out"/tests/*_cuda.sh; do
        [[ -e $script ]] || continue
        entry="$(basename "$script" .sh)"
        [[ $entry == sanitizer_canary_cuda ]] || entries+=("$entry")
      done
    fi
    for entry in "${entries[@]}"; do
      if [[ $entry == *:* ]]; then
        runs+=("${entry%%:*} ${entry#*:}")
      else
        for tool in memcheck racecheck synccheck initcheck; do runs+=("$tool $entry"); done
      fi
    done
    # Several at once (one GPU, many cores: the tools are CPU-bound), each
    # result in a file, recorded in order once all have ended.
    local parallel="${KILN_SANITIZE_JOBS:-$(( $(nproc) / 3 > 0 ? $(nproc) / 3 : 1 ))}"
    for run in "${runs[@]}"; do
      tool=${run% *} t=${run#* }
      [[ -e $out/tests/$t.sh ]] || { echo "NO-SUCH-TEST" >"$out/sanitize-$tool-$t.result"; continue; }
      while [[ $(jobs -rp | wc -l) -ge $parallel ]]; do wait -n; done
      # memcheck without --leak-check: the CUDA backend is deliberately
      # kept until exit (src/backend/registry.cpp), so its pools, handles
      # and workspaces would be reported as leaks by design. (cuDNN's plan
      # timing saves the step buffers before a step has written them: they
      # are zeroed when allocated, Model::make_workspace and
      # Trainer::ensure_capacity, so initcheck has nothing to report there.)
      secs=$(limit "$per" "$stage_end")
      filter=(); own_kernels "$tool" && filter=("${own_only[@]}")
      (timed "$secs" "$out/sanitize-$tool-$t.log" bash "$out/tests/$t.sh" "$sanitizer" --tool "$tool" \
        --error-exitcode 1 "${filter[@]}" >"$out/sanitize-$tool-$t.result") &
    done
    wait
    for run in "${runs[@]}"; do
      tool=${run% *} t=${run#* }
      r="$(cat "$out/sanitize-$tool-$t.result" 2>/dev/null)"
      r=${r:-BUDGET}
      errs="$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize-$tool-$t.log" 2>/dev/null | tail -1)"
      st="$(status_of "$r")"
      if [[ $r == PASSED || $r == "FAILED(rc=1)" ]]; then
        # rc 1 is the tool's --error-exitcode: whose errors they are
        errs="$("$python" "$root/scripts/sanitizer_verdict.py" "$out/sanitize-$tool-$t.log")"
        case $? in 0) st=passed ;; 3) st=UNSURE ;; *) st=FAILED ;; esac
      elif [[ $r == TIMEOUT && -s $out/sanitize-$tool-$t.log ]]; then
        # What the tool reported before the limit: a finding is one, and
        # none so far says how far the run got clean.
        errs="before the limit: $("$python" "$root/scripts/sanitizer_verdict.py" "$out/sanitize-$tool-$t.log")"
        [[ $? -eq 1 ]] && st=FAILED
      fi
      own_kernels "$tool" && errs+=" [kiln's kernels only]"
      record "sanitize $tool $t" "$st" "$r ${errs}"
    done
  fi
}

# ---- bench ----------------------------------------------------------------------
stage_bench() {
  if [[ ! -x $build/bench/kiln_bench ]]; then
    record bench SKIPPED "no $build/bench/kiln_bench"
  else
    bl=$(limit 300)
    if [[ -n ${KILN_BENCH_ARGS:-} ]]; then
      read -r -a bargs <<<"$KILN_BENCH_ARGS"
    else
      bargs=(--repeats 1 --epochs 1 --warmup 1 --loops resident,graph)
      [[ -n $data ]] || bargs+=(--workloads W)
    fi
    r=$(timed "$bl" "$out/bench.log" "$python" "$root/bench/run.py" --device cuda --build-dir "$build" \
      --data "${data:-/nonexistent}" --time-budget $((bl - 15)) --out "$out/bench-cuda.json" "${bargs[@]}")
    record bench "$(status_of "$r")" "$r bench.log, bench-cuda.json (data: ${data:-none, so W only})"
  fi
}

# ---- ncu ------------------------------------------------------------------------
stage_ncu() {
  if [[ -z $ncu ]]; then
    record ncu SKIPPED "ncu not found"
  elif [[ ! -x $build/bench/kiln_bench ]]; then
    record ncu SKIPPED "no $build/bench/kiln_bench"
  else
    # One step of each (name spec batch precision, then the fast path's
    # parts added to the library's default through KILN_ENABLE, - for none):
    # A and B as the benchmark trains them, A with the narrow step, B in tf32
    # and W in bf16, the precisions of their goals.
    local profiles=("A 784-32-10 128 fp32 -" "A-narrow 784-32-10 128 fp32 narrow" "B 784-1024-1024-10 1024 fp32 -"
      "B-tf32 784-1024-1024-10 1024 tf32 -" "W 4096-4096-4096-4096-4096-10 8192 bf16 -")
    local profile w spec batch precision enable
    for profile in "${profiles[@]}"; do
      read -r w spec batch precision enable <<<"$profile"
      [[ $enable == - ]] && enable=
      # One step between cuProfilerStart/Stop (kiln_bench --profile-steps), after warm-up steps.
      r=$(KILN_ENABLE=$enable timed "$(limit 120)" "$out/ncu-$w.csv" "$ncu" --profile-from-start off \
        --metrics gpu__time_duration.sum --csv --print-units base "$build/bench/kiln_bench" --workload W \
        --spec $spec --batch $batch --precision $precision --steps 1 --windows 1 --profile-steps 1 --device cuda)
      if [[ $r == PASSED ]]; then
        "$python" "$root/bench/ncu_summary.py" "$out/ncu-$w.csv" --steps 1 >"$out/ncu-$w-summary.txt" 2>&1 ||
          r="FAILED(summary)"
      fi
      record "ncu $w" "$(status_of "$r")" "$r ncu-$w.csv, ncu-$w-summary.txt: $(head -1 "$out/ncu-$w-summary.txt" 2>/dev/null)"
    done
  fi
}

# ---- the stages, in the order given ----------------------------------------------
# Packed after every stage, so a call cut short still brings back what ran.
for s in ${stages//,/ }; do "stage_${s//-/_}"; pack; done

log "done in $((SECONDS - start)) s; summary:"
cat "$summary"
pack
if [[ $failed -ne 0 ]]; then exit 1; fi
if [[ $timedout -ne 0 ]]; then exit 3; fi
exit 0
