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
export CGO_CFLAGS="-I$root/include" CGO_LDFLAGS="-L$build" GOPROXY=off GOFLAGS=-mod=mod
export KILN_LIB_DIR="$build" CARGO_TARGET_DIR="$out/rust-target"
# A rustup toolchain lives in ~/.cargo/bin, which a non-login shell (CI) may
# not have on PATH; scripts/install-deps.sh installs Debian's cargo only when
# neither exists.
rustup_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
if ! command -v cargo >/dev/null && [ -x "$rustup_bin/cargo" ]; then export PATH="$rustup_bin:$PATH"; fi

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
  for f in go/internal/capi/kiln.go go/internal/capi/kiln_wrap.c csharp/generated/NativeMethods.cs \
           csharp/generated/NativeMethodsPINVOKE.cs csharp/generated/kiln_wrap.c rust/kiln-sys/src/bindings.rs; do
    diff -u "$here/$f" "$tmp/$f" || { echo "bindings/$f is stale: run bindings/generate.sh" >&2; status=1; }
  done
  rm -rf "$tmp"
  return $status
}

go_tests() {
  # vet the hand-written package; internal/capi is SWIG output
  (cd "$here/go" && go vet . && GODEBUG=cgocheck=2 go test -count=1 -v ./... 2>&1 | grep -E '^(--- |ok|FAIL|PASS|panic)'; exit "${PIPESTATUS[0]}") &&
  (cd "$root/examples/go" && go build -o "$out/go-example" .)
}

rust_tests() {
  (cd "$here/rust" && cargo test --offline 2>&1 |
     grep -E '^(test |test result|error|warning|thread .* panicked|  left|  right)'; exit "${PIPESTATUS[0]}") &&
  # The figures the memory and coverage tests measured.
  (cd "$here/rust" && cargo test --offline -q --test memory --test coverage -- --nocapture 2>&1 |
     grep -E 'RSS|C functions'; exit "${PIPESTATUS[0]}") &&
  (cd "$root/examples/rust" && cargo build --offline --release -q) &&
  rust_linking
}

# kiln-sys's linking, as users meet it: failures that name what to set, the
# opt-in rpath, and a program outside the repository built against an
# installed kiln found through pkg-config alone.
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
  # An installed kiln, and a program outside the repository that finds it
  # through PKG_CONFIG_PATH alone (the README's recipe).
  cmake --install "$build" --prefix "$work/prefix" >"$log" 2>&1 ||
    { cat "$log" >&2; echo "rust: cmake --install failed" >&2; return 1; }
  local pc; pc=$(dirname "$(find "$work/prefix" -name kiln.pc | head -n 1)")
  mkdir -p "$work/hello/src"
  cat >"$work/hello/Cargo.toml" <<TOML
[package]
name = "hello-kiln"
version = "0.1.0"
edition = "2021"

[dependencies]
kiln = { path = "$here/rust/kiln" }
TOML
  cat >"$work/hello/src/main.rs" <<'RUST'
fn main() -> Result<(), kiln::Error> {
    let ctx = kiln::Context::new()?;
    let x = kiln::Tensor::from_slice(&ctx, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2], kiln::Device::Cpu)?;
    let y = (&x * &x)?;
    println!("kiln {}: {y} = {:?}", kiln::version(), y.to_vec::<f32>()?);
    Ok(())
}
RUST
  local libdir; libdir=$(PKG_CONFIG_PATH=$pc pkg-config --variable=libdir kiln)
  (cd "$work/hello" && env -u KILN_LIB_DIR -u CARGO_TARGET_DIR -u LD_LIBRARY_PATH PKG_CONFIG_PATH="$pc" \
     RUSTFLAGS="-C link-arg=-Wl,-rpath,$libdir" cargo build --offline -q) >"$log" 2>&1 ||
    { cat "$log" >&2; echo "rust: a program outside the repository does not build against the installed kiln" >&2; return 1; }
  local said; said=$(env -u LD_LIBRARY_PATH "$work/hello/target/debug/hello-kiln") ||
    { echo "rust: the installed-kiln program failed: $said" >&2; return 1; }
  [ "$said" = "kiln $(PKG_CONFIG_PATH=$pc pkg-config --modversion kiln): tensor([2, 2], f32, cpu) = [1.0, 4.0, 9.0, 16.0]" ] ||
    { echo "rust: the installed-kiln program printed '$said'" >&2; return 1; }
  echo "rust: outside the repository, against kiln installed in a prefix: $said"
}

csharp_tests() {
  local cs="$out/csharp"
  mkdir -p "$cs" &&
  cc -shared -fPIC -O2 -Wall -I"$root/include" "$here/csharp/generated/kiln_wrap.c" -L"$build" -lkiln \
     -o "$cs/libkiln_csharp.so" &&
  mcs -target:library -warnaserror -out:"$cs/Kiln.dll" "$here"/csharp/generated/*.cs "$here"/csharp/src/*.cs &&
  mcs -warnaserror -out:"$cs/KilnTests.exe" -r:"$cs/Kiln.dll" "$here/csharp/tests/Tests.cs" &&
  mcs -warnaserror -out:"$cs/FashionMnist.exe" -r:"$cs/Kiln.dll" "$root/examples/csharp/FashionMnist.cs" &&
  LD_LIBRARY_PATH="$cs:$LD_LIBRARY_PATH" mono "$cs/KilnTests.exe"
}

run_examples() {
  local cs="$out/csharp"
  "$out/go-example" && "$CARGO_TARGET_DIR/release/kiln-example" &&
  LD_LIBRARY_PATH="$cs:$LD_LIBRARY_PATH" mono "$cs/FashionMnist.exe"
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
