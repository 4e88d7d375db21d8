#!/bin/sh
# Installs the build tree into a temporary prefix and checks it as a user
# would meet it: a program built through find_package(kiln) and one built
# through pkg-config both run, and so does one built through the build
# tree's own kiln.pc; libkiln.so exports only kiln_* symbols (and kiln's
# internal C++ symbols under its private version node, for its plugins), has
# the SONAME libkiln.so.1 and needs no CUDA library.
#
# Usage: test_install.sh CMAKE BUILD_DIR CONSUMER_SOURCE_DIR C_COMPILER
# Exits 77 (skipped) only when a tool it needs is missing.
set -eu

cmake=$1
build_dir=$2
consumer_dir=$3
cc=$4

for tool in "$cmake" "$cc" nm c++filt readelf pkg-config; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "test_install: skipped, $tool is not installed"
    exit 77
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-install-XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

die() {
  echo "test_install: FAILED: $*" >&2
  exit 1
}

"$cmake" --install "$build_dir" --prefix "$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; die "cmake --install failed"; }

lib=$(find "$prefix" -name libkiln.so -print | head -n 1)
[ -n "$lib" ] || die "no libkiln.so under $prefix"
libdir=$(dirname "$lib")
[ -f "$prefix/include/kiln/kiln.h" ] || die "kiln/kiln.h is not installed"
# libkiln looks for its plugins (CUDA, distributed, ONNX) in its own directory.
for plugin in libkiln_cuda.so libkiln_dist.so libkiln_onnx.so; do
  if [ -e "$build_dir/$plugin" ] && [ ! -e "$libdir/$plugin" ]; then
    die "the plugin $plugin was built but is not installed next to libkiln.so in $libdir"
  fi
done

# ---- the library's interface ---------------------------------------------
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
[ "$soname" = "libkiln.so.1" ] || die "SONAME is '$soname', expected libkiln.so.1"
[ -e "$libdir/libkiln.so.1" ] || die "libkiln.so.1 (the SONAME link) is not installed"

cuda_needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p' |
  grep -E '^lib(cuda|cudart|cublas|cublasLt|cudnn|nvrtc|nvidia)' || true)
[ -z "$cuda_needed" ] || die "libkiln.so needs CUDA libraries: $cuda_needed"

# The public API unversioned; kiln's internals (namespace kiln) under the
# private node KILN_PRIVATE_<build ID> only (src/api/kiln.map.in,
# docs/plugins.md), with that node's own symbol; nothing else.
exports=$(nm -D --defined-only "$lib" | awk '{ print $3 }')
foreign=$(echo "$exports" | grep -Ev '^kiln_[A-Za-z0-9_]*$|@@KILN_PRIVATE_[0-9a-f]{16}$|^KILN_PRIVATE_[0-9a-f]{16}$' || true)
[ -z "$foreign" ] || die "libkiln.so exports symbols outside kiln_* and its private node: $(echo "$foreign" | head -n 20 | tr '\n' ' ')"
outside=$(echo "$exports" | sed -n 's/@@KILN_PRIVATE_[0-9a-f]*$//p' | c++filt |
  grep -Ev '^(kiln::|typeinfo for kiln::|typeinfo name for kiln::|vtable for kiln::)' || true)
[ -z "$outside" ] || die "libkiln.so's private node holds symbols outside namespace kiln: $(echo "$outside" | head -n 20 | tr '\n' ' ')"
nodes=$(echo "$exports" | grep -c '^KILN_PRIVATE_' || true)
[ "$nodes" = 1 ] || die "libkiln.so defines $nodes private version nodes, expected 1"
nm -D --defined-only "$lib" | grep -Eq ' T kiln_context_create(@|$)' || die "kiln_context_create is not exported"

# ---- a consumer through the CMake package --------------------------------
generator=
if command -v ninja >/dev/null 2>&1; then generator="-G Ninja"; fi
# shellcheck disable=SC2086 # $generator is empty or two words on purpose
"$cmake" -S "$consumer_dir" -B "$work/cmake-build" $generator -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log" >&2; die "find_package(kiln) consumer does not configure"; }
"$cmake" --build "$work/cmake-build" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; die "find_package(kiln) consumer does not build"; }
out=$("$work/cmake-build/consumer") || die "the find_package(kiln) consumer failed: $out"
case $out in OK*) ;; *) die "the find_package(kiln) consumer printed '$out'" ;; esac
echo "find_package(kiln): $out"

# ---- a consumer through pkg-config ----------------------------------------
pc_dir=$(dirname "$(find "$prefix" -name kiln.pc -print | head -n 1)")
[ -f "$pc_dir/kiln.pc" ] || die "kiln.pc is not installed"
flags=$(PKG_CONFIG_PATH=$pc_dir pkg-config --cflags --libs kiln) || die "pkg-config cannot read kiln.pc"
pc_libdir=$(PKG_CONFIG_PATH=$pc_dir pkg-config --variable=libdir kiln)
[ -e "$pc_libdir/libkiln.so" ] || die "kiln.pc's libdir '$pc_libdir' does not hold libkiln.so"
# shellcheck disable=SC2086 # $flags is a list of compiler arguments
"$cc" -o "$work/pkg-consumer" "$consumer_dir/consumer.c" $flags -Wl,-rpath,"$pc_libdir" ||
  die "the pkg-config consumer does not build with: $flags"
out=$("$work/pkg-consumer") || die "the pkg-config consumer failed: $out"
case $out in OK*) ;; *) die "the pkg-config consumer printed '$out'" ;; esac
echo "pkg-config: $out"

# ---- the build tree's kiln.pc: an uninstalled kiln through pkg-config ------
tree_libdir=$(PKG_CONFIG_PATH=$build_dir pkg-config --variable=libdir kiln) || die "pkg-config cannot read $build_dir/kiln.pc"
[ -e "$tree_libdir/libkiln.so" ] || die "the build tree's kiln.pc has libdir '$tree_libdir', which does not hold libkiln.so"
flags=$(PKG_CONFIG_PATH=$build_dir pkg-config --cflags --libs kiln)
# shellcheck disable=SC2086 # $flags is a list of compiler arguments
"$cc" -o "$work/tree-consumer" "$consumer_dir/consumer.c" $flags -Wl,-rpath,"$tree_libdir" ||
  die "the build tree consumer does not build with: $flags"
out=$("$work/tree-consumer") || die "the build tree consumer failed: $out"
case $out in OK*) ;; *) die "the build tree consumer printed '$out'" ;; esac
echo "build tree kiln.pc: $out"
echo "test_install: OK"
