#!/usr/bin/env bash
# Prepares what a GPU check carries beside the working tree (the device
# tool's `carry`; scripts/gpu-rehearsal.sh copies the same into its root):
#
#   scripts/gpu-carry.sh [DIR]        (default .gpu-carry in this tree, ignored by git)
#
#   DIR/debs/            Debian packages for what the GPU image may lack,
#                        unpacked there by scripts/unpack-deb.py (no dpkg
#                        needed) only where the image has no copy of its own:
#                        CMocka (the tests), zlib's headers (the IDX reader),
#                        OpenBLAS with its Fortran runtime (the CPU backend
#                        loads it at run time)
#   DIR/fashion-mnist/   the Fashion-MNIST IDX files (gzip, 30 MB), so the
#                        GPU benchmark runs workloads A and B, not only W
#
# Downloads with `apt-get download` (network to a Debian mirror) only what DIR
# lacks, so a second run costs nothing; the dataset comes from KILN_DATA or
# /usr/share/datasets/fashion-mnist (scripts/install-deps.sh installs it).
# Prints what DIR holds and its size; fails when DIR would not leave room for
# the tree under the device tool's 64 MiB.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$root/.gpu-carry}"
# Debian 12 (bookworm) packages: their libraries need glibc 2.34, which the
# GPU image's (Ubuntu 24.04: 2.39) exceeds.
packages=(libcmocka0 libcmocka-dev zlib1g-dev libopenblas0-pthread libgfortran5 libquadmath0)
data="${KILN_DATA:-/usr/share/datasets/fashion-mnist}"
files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
max_bytes=$((56 << 20))  # 64 MiB less room for the working tree

mkdir -p "$dest/debs" "$dest/fashion-mnist"
missing=()
for p in "${packages[@]}"; do
  compgen -G "$dest/debs/${p}_*.deb" >/dev/null || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download "${missing[@]}")
  mv "$tmp"/*.deb "$dest/debs/"
fi
for f in "${files[@]}"; do
  if [[ ! -s $dest/fashion-mnist/$f ]]; then
    if [[ ! -s $data/$f ]]; then
      echo "gpu-carry: $data/$f not found (set KILN_DATA, or install dataset-fashion-mnist)" >&2
      exit 1
    fi
    cp "$data/$f" "$dest/fashion-mnist/$f"
  fi
done
ls -l "$dest/debs" "$dest/fashion-mnist"
total=$(du -sb "$dest" | cut -f1)
echo "gpu-carry: $dest holds ${#packages[@]} packages and Fashion-MNIST, $((total >> 20)) MiB"
if [[ $total -gt $max_bytes ]]; then
  echo "gpu-carry: over $((max_bytes >> 20)) MiB: it would not fit beside the tree in the device tool's 64 MiB" >&2
  exit 1
fi
