#!/usr/bin/env bash
# Downloads the Debian packages that a bare GPU machine (no network, no apt)
# lacks for building and testing kiln into third_party/debs/, to be committed
# and carried there; scripts/gpu-check.sh unpacks them with dpkg -x. By
# default only CMocka (libcmocka-dev and its library libcmocka0, about 40 kB),
# which the C tests need. Name other packages to fetch them instead, e.g.
# libopenblas-dev libopenblas0-pthread libopenblas-pthread-dev if that machine
# has no OpenBLAS (check the sizes before committing anything large).
#
#   scripts/fetch-gpu-debs.sh [PACKAGE...]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/third_party/debs"
packages=("$@")
[[ ${#packages[@]} -gt 0 ]] || packages=(libcmocka-dev libcmocka0)

mkdir -p "$dest"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download "${packages[@]}")
mv "$tmp"/*.deb "$dest"/
ls -l "$dest"
total=$(du -cb "$dest"/*.deb | tail -1 | cut -f1)
echo "fetch-gpu-debs: ${#packages[@]} package(s) in third_party/debs, $total bytes in all"
if [[ $total -gt 1048576 ]]; then
  echo "fetch-gpu-debs: over 1 MiB: carry these files with the working tree instead of committing them" >&2
fi
