#!/usr/bin/env bash
# Every test: installs what is missing, builds everything (Release; with the
# CUDA plugin when nvcc exists), runs the C tests with CTest (tests that need
# a GPU report "skipped" without one), then the bindings' tests through
# bindings/test.sh, then the rehearsal of the GPU machine's check flow
# (below), then the two sanitizer lanes and the mutation lane (below). Runs
# every suite even after one fails, prints a summary and exits non-zero if
# any step failed.
#
#   scripts/test.sh
#
# The GPU rehearsal (scripts/gpu-rehearsal.sh, logs in $KILN_BUILD_DIR-rehearsal)
# builds and tests kiln inside a minimal root that holds only what the GPU
# machine's image surely holds, without network, so a dependency that image
# lacks fails here rather than on a rare GPU session. It needs root, mount
# and network namespaces and debootstrap; where any is missing it is reported
# as "skipped: <why>", never as passed. KILN_SKIP_REHEARSAL=1 leaves it out.
# The first run downloads about 700 MB (a Debian root, cuDNN's and NCCL's
# wheels) into ~/.cache/kiln-rehearsal; later runs reuse them.
#
# The sanitizer lanes build the CPU library and the C tests once more, each
# in a build directory of its own ($KILN_BUILD_DIR-asan, $KILN_BUILD_DIR-tsan;
# KILN_SANITIZER_LANES=0 leaves both out):
#  - ASan + UBSan (-fsanitize=address,undefined,enum,float-cast-overflow, the
#    first report fails the test, LeakSanitizer on): the whole C suite but
#    ASAN_LEFT_OUT;
#  - TSan (-fsanitize=thread): the tests that run kiln from several threads
#    (TSAN_TESTS).
# Suppressions (scripts/sanitizer-suppressions/) name third-party code only,
# each with its reason.
#
# The mutation lane (scripts/mutation.sh, build $KILN_BUILD_DIR-mutation, CPU
# only; KILN_MUTATION_LANE=0 leaves it out) plants each curated bug of
# tests/mutants/*.toml in turn and fails when one survives the tests, or when
# an entry's original text is no longer in its source.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KILN_BUILD_DIR:-$root/build}"

# Left out of the ASan + UBSan lane, by CTest name (a regular expression),
# and why:
#   test_install   builds consumers with the plain compiler against the
#                  instrumented library, which ASan refuses to load without
#                  its runtime first; the Release lane runs it.
#   test_exit_low_memory
#                  runs kiln under ulimit -v of 60-400 MB; ASan reserves
#                  terabytes of address space for its shadow memory at
#                  start, which such a limit forbids. The Release lane runs it.
#   test_abi       compares the Release library with abi/libkiln.abi; an
#                  instrumented library is another binary. The Release lane
#                  runs it.
#   test_no_gpu_cost
#                  holds `kiln devices` to 50 ms and 40 MB, figures of the
#                  Release build; an instrumented one is slower and bigger by
#                  design. The Release lane runs it.
#   dist_test*     (not even built: KILN_BUILD_DIST=OFF) Open MPI under
#                  ASan: mpirun's and libmpi's own leaks would fill the
#                  report, and they are Open MPI's; the Release lane runs
#                  the two-rank tests. test_cli then runs without mpirun.
#   test_dlpack_python
#                  loads the instrumented libkiln into an uninstrumented
#                  Python (NumPy, PyTorch), which ASan refuses unless its
#                  runtime is preloaded into the interpreter; test_dlpack
#                  runs the same checks from C in the lane.
#   example_train_mnist
#                  (not built: KILN_BUILD_EXAMPLES=OFF) trains on
#                  Fashion-MNIST for minutes, several times that under ASan;
#                  training is covered by test_trainer and
#                  test_fashion_mnist's small runs.
#   *_cuda, *_cudnn  no GPU in the lanes (CPU-only build): they would skip.
ASAN_LEFT_OUT='^(test_install|test_abi|test_no_gpu_cost|test_exit_low_memory|test_dlpack_python|dist_test.*|example_train_mnist|.*_cuda|.*_cudnn)$'
# The tests that call kiln from threads of their own (pthread_create in
# the test) or check thread safety: test_context (concurrent contexts and
# plugin loading), test_tensor (ops from many threads), test_dataset
# (shared datasets), test_dlpack (deleters on other threads), test_retain
# (handles retained and released across threads), test_release_race (every
# handle-taking function raced against the release of its handles),
# test_inference (one model predicting on several threads) and
# data_parallel_test (a thread per replica, collectives between them); the
# others run kiln from one thread, where TSan has nothing to check beyond
# kiln's own pool, which these exercise too.
TSAN_TESTS='^(test_context|test_tensor|test_dataset|test_dlpack|test_retain|test_release_race|test_inference|data_parallel_test|thread_pool_test|cpu_bias_grad_test)$'

"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"

results=()
failed=0

echo "== C tests (ctest)"
if ctest --test-dir "$build" --output-on-failure -j "$(nproc)"; then
  results+=("C tests (ctest): passed")
else
  results+=("C tests (ctest): FAILED")
  failed=1
fi

echo "== binding tests (bindings/test.sh)"
if KILN_BUILD_DIR="$build" bash "$root/bindings/test.sh"; then
  results+=("binding tests: passed")
else
  results+=("binding tests: FAILED")
  failed=1
fi

echo "== GPU rehearsal (scripts/gpu-rehearsal.sh)"
mkdir -p "$build-rehearsal"
rehearsal_log="$build-rehearsal/rehearsal.log"
"$root/scripts/gpu-rehearsal.sh" "$build-rehearsal" 2>&1 | tee "$rehearsal_log"
case ${PIPESTATUS[0]} in
  0) results+=("GPU rehearsal: passed ($(grep -o 'passed in [0-9]* s' "$rehearsal_log" | tail -1))") ;;
  77) results+=("GPU rehearsal: $(grep -o 'skipped: .*' "$rehearsal_log" | tail -1)") ;;
  *)
    results+=("GPU rehearsal: FAILED (logs in $build-rehearsal)")
    failed=1
    ;;
esac

# One sanitizer lane: configure the CPU library, the kiln program and the C
# tests with KILN_SANITIZE=$2 in build dir $3 (without the MPI plugin: see
# ASAN_LEFT_OUT) and the optimisation flags $7 (default RelWithDebInfo's),
# build targets $6 (default all), then run the CTest tests that match $4
# and not $5.
sanitizer_lane() {
  local name="$1" sanitize="$2" dir="$3" include="$4" exclude="$5" targets=() flags=()
  for t in ${6:-}; do targets+=(--target "$t"); done
  if [[ -n "${7:-}" ]]; then flags=("-DCMAKE_C_FLAGS_RELWITHDEBINFO=$7" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$7"); fi
  echo "== $name (build $dir)"
  if ! cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${flags[@]}" -DKILN_BUILD_CUDA=OFF \
      -DKILN_BUILD_BENCH=OFF -DKILN_BUILD_EXAMPLES=OFF -DKILN_BUILD_DIST=OFF -DKILN_SANITIZE="$sanitize" >/dev/null ||
    ! cmake --build "$dir" -j "$(nproc)" "${targets[@]}"; then
    results+=("$name: FAILED (build)")
    failed=1
    return
  fi
  local args=(--test-dir "$dir" --output-on-failure -j "$(nproc)" -R "$include")
  if [[ -n "$exclude" ]]; then args+=(-E "$exclude"); fi
  local log="$dir/sanitizer-lane.log"
  if ctest "${args[@]}" 2>&1 | tee "$log"; [[ ${PIPESTATUS[0]} -eq 0 ]]; then
    results+=("$name: passed ($(grep -E 'tests passed, [0-9]+ tests failed out of' "$log" | tail -1 || true))")
  else
    results+=("$name: FAILED: $(grep -E '^[[:space:]]+[0-9]+ - ' "$log" | sed -E 's/^[[:space:]]+[0-9]+ - //' | tr '\n' ' ' || true)(reports in $log)")
    failed=1
  fi
}

if [[ "${KILN_SANITIZER_LANES:-1}" != "0" ]]; then
  supp="$root/scripts/sanitizer-suppressions"
  # halt_on_error: the first report fails the test (UBSan's
  # -fno-sanitize-recover does the same at compile time).
  # allocator_may_return_null: an allocation too large to satisfy returns
  # NULL, as malloc does, instead of ending the program; the tests check that
  # kiln then reports KILN_ERROR_OUT_OF_MEMORY.
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:allocator_may_return_null=1:detect_stack_use_after_return=1"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1:suppressions=$supp/tsan.supp"
  # -O1 and line tables (-g1): what ASan's documentation advises, and the
  # lane builds every target, which at -O2 -g takes twice as long.
  sanitizer_lane "C tests under ASan + UBSan" address,undefined,enum,float-cast-overflow "$build-asan" . \
    "$ASAN_LEFT_OUT" "" "-O1 -g1"
  sanitizer_lane "threaded C tests under TSan" thread "$build-tsan" "$TSAN_TESTS" "" \
    "test_context test_tensor test_dataset test_dlpack test_retain test_release_race test_inference data_parallel_test \
    thread_pool_test cpu_bias_grad_test"
  unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS
fi

if [[ "${KILN_MUTATION_LANE:-1}" != "0" ]]; then
  echo "== mutation lane (scripts/mutation.sh, build $build-mutation)"
  mutation_log="$build-mutation.log"
  if KILN_MUTATION_BUILD_DIR="$build-mutation" "$root/scripts/mutation.sh" 2>&1 | tee "$mutation_log";
    [[ ${PIPESTATUS[0]} -eq 0 ]]; then
    results+=("mutation lane: passed ($(grep -E '^mutation: [0-9]+ mutants' "$mutation_log" | tail -1))")
  else
    results+=("mutation lane: FAILED ($(grep -E '^mutation: ' "$mutation_log" | tail -1); log in $mutation_log)")
    failed=1
  fi
fi

echo
echo "== summary"
printf '  %s\n' "${results[@]}"
if [[ $failed -ne 0 ]]; then
  echo "test.sh: FAILED"
  exit 1
fi
echo "test.sh: all passed"
