#!/bin/bash
# Tests the Go, Rust and C# bindings against a built libkiln.
#   bindings/test.sh [BUILD_DIR]     (or KILN_BUILD_DIR; default: build)
# 1. regenerates the SWIG and bindgen output and fails on any difference
#    from the committed files;
# 2. go test (GODEBUG=cgocheck=2), cargo test --offline, the C# test runner;
#    and builds the three examples (KILN_RUN_EXAMPLES=1 also runs them).
# Build outputs go under BUILD_DIR/bindings. Exits non-zero on any failure.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-${KILN_BUILD_DIR:-$root/build}}
build=$(cd "$build" 2>/dev/null && pwd) || { echo "bindings: no build directory ${1:-${KILN_BUILD_DIR:-$root/build}}" >&2; exit 2; }
[ -e "$build/libkiln.so" ] || { echo "bindings: $build/libkiln.so not found: build the kiln target first" >&2; exit 2; }
out="$build/bindings"
mkdir -p "$out"

export LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GOPROXY=off GOFLAGS=-mod=mod
export KILN_LIB_DIR="$build" CARGO_TARGET_DIR="$out/rust-target"
# Rust: Debian's toolchain (rustc 1.63, the crates' rust-version) when it is
# installed, even where a newer rustup one comes first on PATH, so that the
# oldest supported compiler is the one tested (through links on PATH, which
# `env ... cargo` finds too); rustup's only where there is no other.
# KILN_RUST_BIN names another directory holding cargo, rustc and rustdoc.
rustup_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
if [ -z "${KILN_RUST_BIN:-}" ] && [ -x /usr/bin/cargo ] && [ -x /usr/bin/rustc ]; then
  KILN_RUST_BIN="$out/debian-rust"
  mkdir -p "$KILN_RUST_BIN"
  for tool in cargo rustc rustdoc; do ln -sf "/usr/bin/$tool" "$KILN_RUST_BIN/$tool"; done
fi
if [ -n "${KILN_RUST_BIN:-}" ]; then export PATH="$KILN_RUST_BIN:$PATH"
elif ! command -v cargo >/dev/null && [ -x "$rustup_bin/cargo" ]; then export PATH="$rustup_bin:$PATH"; fi
echo "bindings: $(go version 2>/dev/null), $(cargo --version 2>/dev/null), $(mono --version 2>/dev/null | head -n 1)"

declare -A result
failed=0
step() { # step NAME COMMAND...: runs a command, records its outcome under NAME
  local name=$1; shift
  echo "== bindings: $name"
  if "$@"; then
    result[$name]=${result[$name]:-ok}
  else
    result[$name]=FAILED; failed=1
  fi
}

generated() {
  local tmp; tmp=$(mktemp -d) || return 1
  "$here/generate.sh" "$tmp" >/dev/null || { rm -rf "$tmp"; return 1; }
  local status=0
  for f in go/internal/capi/kiln.go go/internal/capi/kiln_wrap.c csharp/src/Native.g.cs \
           rust/kiln-sys/src/bindings.rs; do
    diff -u "$here/$f" "$tmp/$f" || { echo "bindings/$f is stale: run bindings/generate.sh" >&2; status=1; }
  done
  rm -rf "$tmp"
  return $status
}

go_tests() {
  # cgo finds kiln through the build tree's kiln.pc (#cgo pkg-config: kiln).
  # vet the hand-written package (internal/capi is SWIG output); the race
  # detector runs the tests of concurrent use (Close racing with itself and
  # with calls, shared inference, callbacks), the others run with cgocheck=2.
  (cd "$here/go" && export PKG_CONFIG_PATH="$build${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" &&
    go vet . && GODEBUG=cgocheck=2 go test -count=1 -v ./... 2>&1 |
      grep -E '^(--- |ok|FAIL|PASS|panic)|: (8000|[0-9,]+ closed|[0-9]+ rounds|[0-9]+ C functions|singleton|two ranks)'
    [ "${PIPESTATUS[0]}" = 0 ] || exit 1
    go test -race -count=1 -run 'Race|Racing|Concurrent|ReleaseFrom|Fit|Logger' . 2>&1 | tail -n 20; exit "${PIPESTATUS[0]}") &&
  (cd "$root/examples/go" && PKG_CONFIG_PATH="$build" go build -o "$out/go-example" .) &&
  go_installed
}

# The newcomer's path, as each binding's README shows it: kiln installed into
# a prefix in a fresh HOME outside the repository, the binding packaged next
# to it (package.sh), and the README's complete program built and run by the
# README's own commands, in a shell that has no variable but PATH and HOME
# besides those the commands export.
#   readme_program README LANG     the fenced LANG block of "## A complete program"
#   readme_commands README         the last sh block of "## Install"
readme_program() {
  awk -v lang="$2" '/^## /{f = ($0 == "## A complete program")} f && $0 == "```" lang {g=1; next} g && /^```$/{exit} g' "$1"
}
readme_commands() {
  awk '/^## /{f = ($0 == "## Install")} f && /^```sh$/{g=1; b=""; next} g && /^```$/{g=0; last=b; next} g{b = b $0 "\n"} END{printf "%s", last}' "$1"
}
# newcomer BINDING README PROGRAM_PATH: sets up HOME=$1's temp dir and runs;
# prints the program's output; the caller checks it.
newcomer() {
  local binding=$1 readme=$2 program=$3 home status=0
  home=$(mktemp -d) || return 1
  { cmake --install "$build" --prefix "$home/kiln" >"$home/install.log" 2>&1 &&
    "$here/package.sh" "$build" "$home/kiln" "$binding" >>"$home/install.log" 2>&1; } ||
    { cat "$home/install.log" >&2; rm -rf "$home"; return 1; }
  mkdir -p "$(dirname "$home/$program")"
  readme_program "$readme" "$4" >"$home/$program"
  local commands; commands=$(readme_commands "$readme")
  [ -s "$home/$program" ] && [ -n "$commands" ] || { echo "$readme: no program or no install commands found" >&2; status=1; }
  [ $status = 0 ] && { env -i PATH="$PATH" HOME="$home" bash -euc "cd; $commands" || status=1; }
  rm -rf "$home"
  return $status
}

# check_newcomer NAME OUTPUT: the README program trained, stopped itself
# after the epoch whose report asked it to, saved, loaded and predicted.
check_newcomer() {
  local name=$1 said=$2 epochs stopped right
  printf '%s\n' "$said" | sed "s/^/  $name: /"
  epochs=$(printf '%s\n' "$said" | grep -c '^epoch [0-9]*:')
  stopped=$(printf '%s\n' "$said" | sed -n 's/^stopped: .*[^0-9]\([0-9][0-9]*\) epochs.*/\1/p')
  right=$(printf '%s\n' "$said" | python3 -c '
import re, sys
m = re.search(r"predicted \[([0-9 ,]+)\] labels \[([0-9 ,]+)\]", sys.stdin.read())
p, l = (re.findall(r"\d+", g) for g in m.groups()) if m else ([], [1])
print(sum(a == b for a, b in zip(p, l)) if len(p) == len(l) == 8 else -1)')
  if [ "$epochs" -lt 1 ] || [ "$epochs" -ge 10 ] || [ "$stopped" != "$epochs" ]; then
    echo "$name: the callback did not stop training after the epoch that asked ($epochs reports, stopped at '$stopped')" >&2; return 1
  fi
  printf '%s\n' "$said" | grep -q '^loaded: ' || { echo "$name: no loaded model" >&2; return 1; }
  [ "$right" -ge 5 ] || { echo "$name: the loaded model predicted $right of 8 test labels" >&2; return 1; }
}

rust_installed() {
  local said
  said=$(newcomer rust "$here/rust/kiln/README.md" hello-kiln/src/main.rs rust) || { printf '%s\n' "$said"; return 1; }
  check_newcomer rust "$said"
}

go_installed() {
  local said
  said=$(newcomer go "$here/go/README.md" hello-kiln/main.go go) || { printf '%s\n' "$said"; return 1; }
  check_newcomer go "$said"
}

rust_tests() {
  (cd "$here/rust" && cargo test --offline 2>&1 |
     grep -E '^(test |test result|error|warning|thread .* panicked|  left|  right)'; exit "${PIPESTATUS[0]}") &&
  # The figures the memory and coverage tests measured.
  (cd "$here/rust" && cargo test --offline -q --test memory --test coverage -- --nocapture 2>&1 |
     grep -E 'RSS|C functions'; exit "${PIPESTATUS[0]}") &&
  (cd "$root/examples/rust" && cargo build --offline --release -q) &&
  rust_linking && rust_installed
}

# kiln-sys's linking, as users meet it: failures that name what to set and
# the opt-in rpath (rust_installed builds a program against an installed kiln).
rust_linking() {
  local work status=0
  work=$(mktemp -d) || return 1
  rust_linking_in "$work" || status=1
  rm -rf "$work"
  return $status
}

rust_linking_in() {
  local work=$1 log=$1/cargo.log
  # Nothing on PKG_CONFIG_PATH (nor the system's directories): the message
  # names both ways out.
  mkdir -p "$work/empty" "$work/old"
  if (cd "$here/rust" && env -u KILN_LIB_DIR PKG_CONFIG_PATH="$work/empty" PKG_CONFIG_LIBDIR="$work/empty" \
        CARGO_TARGET_DIR="$out/rust-link-target" cargo build --offline -q -p kiln-sys) >"$log" 2>&1 ||
     ! grep -q 'PKG_CONFIG_PATH' "$log" || ! grep -q 'KILN_LIB_DIR' "$log"; then
    cat "$log" >&2; echo "rust: kiln-sys without kiln did not fail naming PKG_CONFIG_PATH and KILN_LIB_DIR" >&2; return 1
  fi
  # A kiln older than the header the bindings came from is refused.
  printf 'Name: kiln\nDescription: old\nVersion: 0.0.1\nLibs: -L%s -lkiln\n' "$build" >"$work/old/kiln.pc"
  if (cd "$here/rust" && env -u KILN_LIB_DIR PKG_CONFIG_PATH="$work/old" PKG_CONFIG_LIBDIR="$work/empty" \
        CARGO_TARGET_DIR="$out/rust-link-target" cargo build --offline -q -p kiln-sys) >"$log" 2>&1 ||
     ! grep -q 'kiln 0.0.1 .* is older than' "$log"; then
    cat "$log" >&2; echo "rust: kiln-sys accepted kiln 0.0.1" >&2; return 1
  fi
  # KILN_RPATH=1: the crates' tests, doc tests included, find libkiln
  # without LD_LIBRARY_PATH.
  (cd "$here/rust" && env -u LD_LIBRARY_PATH KILN_RPATH=1 CARGO_TARGET_DIR="$out/rust-rpath-target" \
     cargo test --offline -q) >"$log" 2>&1 ||
    { cat "$log" >&2; echo "rust: KILN_RPATH=1 tests did not run without LD_LIBRARY_PATH" >&2; return 1; }
}

# C#: Kiln.dll and its NuGet layout (csharp/build.py, from csharp/src/Kiln.csproj).
# The tests run as a Mono program does: Kiln.dll from the package's
# lib/netstandard2.1 and its native libraries copied beside the runner, with
# no LD_LIBRARY_PATH or MONO_PATH. Then the README's program is built from
# the package a fresh HOME installs with nuget (csharp_installed).
csharp_tests() {
  local cs="$out/csharp" pkg="$out/csharp/package" run="$out/csharp/tests"
  python3 "$here/csharp/build.py" "$build" "$cs" &&
  rm -rf "$run" && mkdir -p "$run" && cp "$pkg"/lib/netstandard2.1/* "$pkg"/runtimes/linux-x64/native/* "$run"/ &&
  mcs -langversion:7.2 -warnaserror -nologo -out:"$run/KilnTests.exe" -r:"$run/Kiln.dll" -r:Facades/netstandard.dll \
    "$here"/csharp/tests/*.cs &&
  mcs -warnaserror -nologo -out:"$cs/FashionMnist.exe" -r:"$cs/Kiln.dll" -r:Facades/netstandard.dll \
    "$root/examples/csharp/FashionMnist.cs" &&
  env -u LD_LIBRARY_PATH -u MONO_PATH KILN_SOURCE_DIR="$root" mono "$run/KilnTests.exe" &&
  csharp_installed
}

csharp_installed() {
  local said
  said=$(newcomer csharp "$here/csharp/README.md" hello-kiln/Program.cs csharp) || { printf '%s\n' "$said"; return 1; }
  check_newcomer csharp "$said"
}

run_examples() {
  local cs="$out/csharp"
  "$out/go-example" && "$CARGO_TARGET_DIR/release/kiln-example" &&
  mono "$cs/FashionMnist.exe"
}

step generated generated
step go go_tests
step rust rust_tests
step csharp csharp_tests
[ "${KILN_RUN_EXAMPLES:-0}" = 1 ] && step examples run_examples

echo "== bindings summary"
for name in generated go rust csharp examples; do
  [ -n "${result[$name]:-}" ] && printf '  %-10s %s\n' "$name" "${result[$name]}"
done
exit $failed
