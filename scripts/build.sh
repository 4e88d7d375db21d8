#!/usr/bin/env bash
# Configures a Release build of kiln in build/ (or $KILN_BUILD_DIR) and builds
# the given targets (default: everything). The CUDA plugin is built whenever
# nvcc exists, on PATH or in /usr/local/cuda, and then always alongside the
# targets, since kiln loads it at run time and no target depends on it.
# KILN_CUDA=OFF builds without it even so.
#
#   scripts/build.sh [TARGET...]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KILN_BUILD_DIR:-$root/build}"

nvcc=""
if [[ "${KILN_CUDA:-ON}" != "OFF" ]]; then
  if command -v nvcc >/dev/null; then
    nvcc="$(command -v nvcc)"
  elif [[ -x /usr/local/cuda/bin/nvcc ]]; then
    nvcc=/usr/local/cuda/bin/nvcc
  fi
fi

cuda_args=(-DKILN_BUILD_CUDA=OFF)
if [[ -n "$nvcc" ]]; then
  cuda_args=(-DKILN_BUILD_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc")
  echo "build: CUDA plugin with $nvcc"
elif [[ "${KILN_CUDA:-ON}" == "OFF" ]]; then
  echo "build: KILN_CUDA=OFF: CPU only (the CUDA plugin is not built)"
else
  echo "build: no nvcc found: CPU only (the CUDA plugin is not built)"
fi

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}"

targets=("$@")
if [[ ${#targets[@]} -gt 0 && -n "$nvcc" ]]; then targets+=(kiln_cuda); fi
target_args=()
for t in "${targets[@]}"; do target_args+=(--target "$t"); done
cmake --build "$build" -j "$(nproc)" "${target_args[@]}"
