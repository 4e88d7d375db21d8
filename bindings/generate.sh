#!/bin/sh
# Regenerates the committed binding code from include/kiln/kiln.h:
#   Go  (SWIG)    -> go/internal/capi/{kiln.go,kiln_wrap.c}
#   C#  (csharp/generate.py) -> csharp/src/Native.g.cs (P/Invoke into libkiln.so)
#   Rust (bindgen) -> rust/kiln-sys/src/bindings.rs
# Usage: bindings/generate.sh [OUTPUT_ROOT]   (default: bindings/ itself)
# test.sh generates into a temporary root and diffs it against the tree.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${1:-$here}" && cd "${1:-$here}" && pwd)
# Relative input paths: SWIG records them in its output, which must not
# depend on where the tree is checked out.
cd "$here"
include=../include

mkdir -p "$out/go/internal/capi" "$out/csharp/src" "$out/rust/kiln-sys/src"

# SWIGWORDSIZE64: stdint.i then typedefs int64_t as long, as LP64 glibc does, so
# the wrappers pass int64_t * without casts. Go: cgo mode, 64-bit intgo.
swig -go -cgo -intgosize 64 -DSWIGWORDSIZE64 -package capi -I"$include" \
  -o "$out/go/internal/capi/kiln_wrap.c" -outdir "$out/go/internal/capi" swig/kiln.i

# C#: DllImports of libkiln.so itself, enums, constants, struct layouts and
# SafeHandles, all read from kiln.h (no wrapper library).
python3 csharp/generate.py "$include/kiln/kiln.h" "$out/csharp/src/Native.g.cs"

# Rust: only kiln's own names; enums as plain integer constants (an out-of-range
# value from C must not be undefined behaviour in Rust). The output is for the
# host's target, which is LP64 here (x86_64 Linux); kiln-sys refuses other
# targets at compile time. For another, add `--target=<triple>` after `--`.
# -fparse-all-comments: kiln.h's plain comments become the raw functions' rustdoc.
bindgen "$include/kiln/kiln.h" \
  --allowlist-function 'kiln_.*' --allowlist-type 'kiln_.*' --allowlist-var 'KILN_.*' \
  --default-enum-style consts \
  --raw-line '#![allow(non_camel_case_types, non_upper_case_globals, dead_code)]' \
  -o "$out/rust/kiln-sys/src/bindings.rs" -- -I"$include" -fparse-all-comments
