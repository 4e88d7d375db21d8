#!/bin/bash
# Compares the working tree's AVX2 blocked kernel (src/backend/cpu/
# sgemm_avx2.cpp) with the one at a git revision, in one process
# (bench/sgemm_avx2_ab.cpp says why):
#   bash bench/sgemm_avx2_ab.sh REV [ROUNDS] [BUILD_DIR]
# Needs a built libkiln in BUILD_DIR (build by default): the two versions'
# calls into the rest of kiln (kiln::Error, sgemm_avx2_transpose8 through
# the header) go to it. Only on a CPU with AVX2 and FMA.
set -euo pipefail
rev=${1:?usage: bash bench/sgemm_avx2_ab.sh REV [ROUNDS] [BUILD_DIR]}
rounds=${2:-40}
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${3:-$root/build}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Each version in its own namespace: kiln::cpu::v0 (REV), kiln::cpu::v1.
rename() { sed -e "s/^namespace kiln::cpu {/namespace kiln::cpu::$1 {/"; }
git -C "$root" show "$rev:src/backend/cpu/sgemm_avx2.cpp" | rename v0 > "$work/v0.cpp"
rename v1 < "$root/src/backend/cpu/sgemm_avx2.cpp" > "$work/v1.cpp"
flags=(-O3 -std=c++17 -fPIC -I"$root/src" -I"$root/include")
for f in v0 v1; do g++ "${flags[@]}" -c "$work/$f.cpp" -o "$work/$f.o" & done
g++ "${flags[@]}" -c "$root/bench/sgemm_avx2_ab.cpp" -o "$work/main.o"
wait
g++ "$work/main.o" "$work/v0.o" "$work/v1.o" -o "$work/sgemm_avx2_ab" -L"$build" -lkiln -Wl,-rpath,"$build"
"$work/sgemm_avx2_ab" "$rounds"
