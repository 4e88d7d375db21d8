#!/usr/bin/env bash
# Installs the Debian packages that building and testing kiln need, and only
# those that are missing (so a second run does nothing and needs no network).
#
#   scripts/install-deps.sh          everything: C library, tests, the Go, Rust
#                                    and C# bindings, the Fashion-MNIST dataset
#   scripts/install-deps.sh --core   only what builds the library, its tests and
#                                    the kiln program (Open MPI included), plus
#                                    the dataset
#
# The CUDA toolkit is not a Debian package here: it is used when nvcc exists
# (on PATH or in /usr/local/cuda) and the build goes without it otherwise.
set -euo pipefail

# Open MPI: libkiln_dist.so (distributed training) and the mpirun the
# multi-rank tests run under.
# abigail-tools: test_abi compares every build's ABI with abi/libkiln.abi
# (it skips without abidiff, and then guards nothing).
# libonnx-dev, libprotobuf-dev: libkiln_onnx.so (ONNX export and import).
# ONNX Runtime is not a Debian package: tests/onnx_check.py skips without it.
# debootstrap, python3-pip: scripts/gpu-rehearsal.sh (test.sh runs it) builds
# its minimal root with debootstrap and fetches cuDNN's and NCCL's wheels
# with pip.
core=(cmake g++ ninja-build pkg-config libopenblas-dev libcmocka-dev zlib1g-dev
  dataset-fashion-mnist openmpi-bin libopenmpi-dev abigail-tools libonnx-dev libprotobuf-dev
  debootstrap python3-pip)
# bindgen loads libclang at run time but does not depend on it in Debian.
# python3 runs bindings/csharp/generate.py and build.py (mcs builds Kiln.dll;
# mono-devel brings Mono.Cecil, which retargets it to netstandard2.1); nuget
# installs the Kiln package the way bindings/csharp/README.md shows.
# cargo is Debian's (rustc 1.63), even beside a rustup toolchain: the Rust
# crates declare rust-version 1.63, and this keeps them honest about it.
bindings=(swig golang-go cargo mono-mcs mono-devel nuget python3 bindgen libclang1)

case "${1:-}" in
  --core) wanted=("${core[@]}") ;;
  "") wanted=("${core[@]}" "${bindings[@]}") ;;
  *) echo "usage: $0 [--core]" >&2; exit 2 ;;
esac

missing=()
for pkg in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#wanted[@]} packages are installed"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
