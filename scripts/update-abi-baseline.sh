#!/usr/bin/env bash
# Regenerates abi/libkiln.abi, the ABI baseline that tests/test_abi.sh
# compares every build against, from a built libkiln.so:
#
#   scripts/update-abi-baseline.sh BUILD_DIR          (e.g. build-cpu)
#   scripts/update-abi-baseline.sh -o FILE LIBRARY    (any path; test_abi.sh uses this)
#
# Run it after an intended, compatible change to include/kiln/kiln.h (a new
# function, a field appended to a struct_size struct) and commit the new
# baseline with the header. Only the public API counts: abidw keeps the
# exported kiln_* functions and the types under include/kiln they reach
# (the handles stay opaque), and the symbols of libkiln's private version
# node (kiln's internals, exported for its plugins: src/api/kiln.map.in) are
# dropped. Build paths, source locations and DT_NEEDED
# entries are left out, so the file depends only on the API: two runs, or
# two checkouts, give identical files.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() {
  echo "usage: $0 [-o OUTPUT] BUILD_DIR|LIBRARY   (default OUTPUT: $root/abi/libkiln.abi)" >&2
  exit 2
}
out="$root/abi/libkiln.abi"
while getopts o: opt; do
  case $opt in
    o) out=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -eq 1 ]] || usage
lib=$1
[[ -d $lib ]] && lib="$lib/libkiln.so"
[[ -f $lib ]] || { echo "error: $lib not found; build the kiln target first" >&2; exit 1; }
command -v abidw >/dev/null || { echo "error: abidw not found; install abigail-tools" >&2; exit 1; }
if ! readelf -S --wide "$lib" | grep -q '\.debug_info'; then
  echo "error: $lib has no debug info, so abidw cannot see the API's types" \
    "(CMakeLists.txt compiles src/api with -g; was it built from this tree?)" >&2
  exit 1
fi

mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
abidw --headers-dir "$root/include/kiln" --drop-private-types --exported-interfaces-only \
  --no-corpus-path --no-comp-dir-path --no-show-locs --no-elf-needed --type-id-style hash \
  --out-file "$tmp" "$lib"
# Each translation unit is named by its absolute source path: keep it from src/ on.
sed -i -E "s|^(  <abi-instr [^>]*path=')[^']*/(src/[^']*')|\1\2|" "$tmp"
# The private node KILN_PRIVATE_<build ID>: not the public ABI, and named
# after the build, so it would change the file with every build. Its symbols
# have no debug info (only src/api is compiled with -g, with hidden
# visibility), so they appear only in the ELF symbol lists.
sed -i "/<elf-symbol [^>]*version='KILN_PRIVATE_/d" "$tmp"
sed -i '/^  <elf-variable-symbols>$/{N;/^  <elf-variable-symbols>\n  <\/elf-variable-symbols>$/d}' "$tmp"
if grep -q "KILN_PRIVATE_" "$tmp"; then
  echo "error: the ABI file names libkiln's private version node:" >&2
  grep "KILN_PRIVATE_" "$tmp" | head -n 5 >&2
  exit 1
fi
if grep -q "path='/" "$tmp"; then
  echo "error: an absolute path is left in the ABI file:" >&2
  grep "path='/" "$tmp" >&2
  exit 1
fi
symbols=$(grep -c '<elf-symbol ' "$tmp" || true)
[[ $symbols -gt 0 ]] || { echo "error: abidw found no exported kiln_* symbols in $lib" >&2; exit 1; }
chmod 0644 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "wrote $out ($symbols exported symbols) from $(readlink -f "$lib")"
