#!/usr/bin/env bash
# A rehearsal of the GPU machine's check flow, without a GPU: builds a
# minimal root holding only what the GPU image surely holds, copies the tree
# and what a GPU run carries into it, and runs
#   scripts/gpu-check.sh OUT env,build,test-safe,test-default,test
# there with no network. It fails unless every stage passes: the build, the
# whole CTest suite (the GPU tests skip, everything else passes), and the
# dependency report (nothing MISSING). So a dependency added to kiln that the
# GPU image lacks breaks CI here, not a rare GPU session.
#
#   scripts/gpu-rehearsal.sh [OUTDIR]      (default build-rehearsal/ in this tree)
#
# The root: Debian 12 (debootstrap --variant=minbase, the essential packages
# and) g++ (run through an /opt/gcc/bin script that links libstdc++
# statically, as on the GPU images), cmake, ninja-build, python3 and
# pkg-config (the H200 image has
# it, and it finds the carried packages' .pc files, which name /usr), with
# dpkg removed afterwards; the
# CUDA toolkit of this machine mounted at the same path, with its cuDNN and
# NCCL hidden (an overlay with whiteouts) because the image takes those
# from PyTorch's pip packages: nvidia-cudnn-cu13 and nvidia-nccl-cu13 are
# unpacked into the root's Python site-packages. Not in the root: OpenBLAS,
# zlib's headers, CMocka, MPI, dpkg, PyTorch; the flow brings the first
# three as carried packages (scripts/gpu-carry.sh) and builds without
# the rest. The run sees no network (unshare -n) and only this root (chroot).
#
# Cached between runs, outside the tree: the root and the wheels under
# ${KILN_REHEARSAL_CACHE:-${XDG_CACHE_HOME:-~/.cache}/kiln-rehearsal} (about
# 2 GB; the first run downloads about 700 MB). The build is always from
# clean: the root is shared by every checkout on the machine, and a build
# directory left by another tree's sources can hold objects newer than this
# tree's files, which the build would then keep (seen: a merge's changes not
# rebuilt). Measured on the 2-core build machine: about 4 minutes, 3 of them
# building.
#
# Skipped, saying why, with exit status 77 (never passed silently, never
# failed for the machine's sake): KILN_SKIP_REHEARSAL=1; not root; no mount
# and network namespaces (unshare); no debootstrap; no CUDA toolkit; the root,
# the wheels or the carried packages cannot be fetched (no network on a first
# run). Exit status 1 when a stage of the check failed, 0 when all passed.
#
# Environment: KILN_SKIP_REHEARSAL, KILN_REHEARSAL_CACHE, KILN_REHEARSAL_MIRROR
# (default http://deb.debian.org/debian), KILN_REHEARSAL_CUDA (the toolkit,
# default /usr/local/cuda), KILN_REHEARSAL_BUDGET (seconds for gpu-check,
# default 4800).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/build-rehearsal}"
cache="${KILN_REHEARSAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln-rehearsal}"
mirror="${KILN_REHEARSAL_MIRROR:-http://deb.debian.org/debian}"
toolkit_link="${KILN_REHEARSAL_CUDA:-/usr/local/cuda}"
suite=bookworm
include=g++,cmake,ninja-build,python3,pkg-config
# The versions PyTorch 2.11 (CUDA 13.0) installs beside itself.
wheels=(nvidia-cudnn-cu13==9.19.0.56 nvidia-nccl-cu13==2.28.9)
started=$SECONDS

say() { echo "gpu-rehearsal: $*"; }
skip() { say "skipped: $*"; exit 77; }

if [[ -n ${KILN_SKIP_REHEARSAL:-} && ${KILN_SKIP_REHEARSAL} != 0 ]]; then skip "KILN_SKIP_REHEARSAL=$KILN_SKIP_REHEARSAL"; fi
[[ $(id -u) -eq 0 ]] || skip "needs root (debootstrap, chroot and mounts in a namespace of its own)"
why=$(unshare -m -n true 2>&1) || skip "cannot make mount and network namespaces (unshare -m -n: $why)"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (scripts/install-deps.sh installs it)"
toolkit="$(readlink -f "$toolkit_link")"
[[ -x $toolkit/bin/nvcc ]] || skip "no CUDA toolkit at $toolkit_link (set KILN_REHEARSAL_CUDA)"
mkdir -p "$cache" "$out" || skip "cannot create $cache"

# ---- the root (cached) --------------------------------------------------------
key="$(printf '%s %s %s' "$suite" "$include" "${wheels[*]}" | sha256sum | cut -c1-12)"
rootfs="$cache/root-$key"
if [[ ! -e $rootfs/.kiln-rehearsal-ready ]]; then
  say "building the minimal root in $rootfs (debootstrap $suite from $mirror; once)"
  rm -rf "$rootfs.new"
  if ! debootstrap --variant=minbase --include="$include" "$suite" "$rootfs.new" "$mirror" >"$out/debootstrap.log" 2>&1; then
    rm -rf "$rootfs.new"
    skip "debootstrap failed (network? $out/debootstrap.log: $(tail -1 "$out/debootstrap.log"))"
  fi
  # The GPU image may have no dpkg: nothing in the flow may need it (its
  # database stays, for the list of what the root holds below).
  rm -f "$rootfs.new"/usr/bin/dpkg "$rootfs.new"/usr/bin/dpkg-*
  rm -rf "$rootfs.new/var/cache/apt/archives"/*.deb
  # PyTorch's cuDNN and NCCL: the wheels unpacked into site-packages, as pip would.
  mkdir -p "$cache/wheels"
  pip=(python3 -m pip)
  "${pip[@]}" --version >/dev/null 2>&1 || pip=(/usr/bin/python3 -m pip)
  if ! "${pip[@]}" download --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
      --platform manylinux_2_18_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 \
      --platform manylinux2014_x86_64 -d "$cache/wheels" "${wheels[@]}" >"$out/pip.log" 2>&1; then
    rm -rf "$rootfs.new"
    skip "cannot download ${wheels[*]} (network? pip? $out/pip.log: $(tail -1 "$out/pip.log"))"
  fi
  site="$(ls -d "$rootfs.new"/usr/lib/python3.*/ | head -1)"
  site="$rootfs.new/usr/local/lib/$(basename "$site")/dist-packages"
  for w in "${wheels[@]}"; do
    name="${w%%==*}"; version="${w##*==}"
    file="$(ls "$cache/wheels/${name//-/_}-${version}-"*.whl 2>/dev/null | head -1)"
    [[ -n $file ]] || { rm -rf "$rootfs.new"; skip "the wheel of $w is not in $cache/wheels"; }
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$file" "$site" ||
      { rm -rf "$rootfs.new"; skip "cannot unpack $file"; }
    chmod -R a+rX "$site"
  done
  touch "$rootfs.new/.kiln-rehearsal-ready"
  rm -rf "$rootfs"
  mv "$rootfs.new" "$rootfs"
fi

# ---- what the GPU run carries (cached) ------------------------------------------
"$root/scripts/gpu-carry.sh" "$cache/carry" >"$out/gpu-carry.log" 2>&1 ||
  skip "cannot prepare the carried packages and data (network? $out/gpu-carry.log: $(tail -1 "$out/gpu-carry.log"))"

# ---- the toolkit without cuDNN and NCCL -------------------------------------------
# Whiteouts (character devices 0/0) in an upper layer hide them in the overlay.
hide="$cache/cuda-hide"
rm -rf "$hide"
mkdir -p "$hide/include" "$hide/lib" "$hide/dist-info"
hidden=0
for f in "$toolkit"/include/cudnn* "$toolkit"/include/nccl* "$toolkit"/lib/libcudnn* "$toolkit"/lib/libnccl* \
  "$toolkit"/dist-info/nvidia_cudnn* "$toolkit"/dist-info/nvidia_nccl*; do
  [[ -e $f || -L $f ]] || continue
  rel="${f#"$toolkit"/}"
  mknod "$hide/$rel" c 0 0 2>/dev/null && hidden=$((hidden + 1))
done

# ---- the GPU image's compiler --------------------------------------------------------
# Its g++ and gcc are /opt/gcc/bin scripts that run the real compiler with -B
# folders (bench/results/cuda-h100-2026-11-26/call2/gxx-wrapper.txt), and
# what they link carries libstdc++ statically: libkiln.so built there
# defined __cxa_* and __once_proxy itself (H200 and H100, 2026-11-26). The
# same here: a -B folder holding only the root's libstdc++.a, first on PATH. A libkiln.so that exported that copy's symbols broke every
# std::call_once in NCCL and cuDNN (libkiln's link options, CMakeLists.txt).
libstdcxx="$(cd "$rootfs" && ls usr/lib/gcc/x86_64-linux-gnu/*/libstdc++.a 2>/dev/null | head -1)"
[[ -n $libstdcxx ]] || skip "the root has no libstdc++.a to link statically"
mkdir -p "$rootfs/opt/gcc/bin" "$rootfs/opt/gcc/lib"
ln -sf "/$libstdcxx" "$rootfs/opt/gcc/lib/libstdc++.a"
# cc and c++ too: CMake looks for c++ before g++ on the whole PATH.
for tool in gcc:gcc g++:g++ cc:gcc c++:g++; do
  printf '#!/bin/sh\nexec /usr/bin/%s -B/opt/gcc/lib/ "$@"\n' "${tool#*:}" >"$rootfs/opt/gcc/bin/${tool%%:*}"
  chmod +x "$rootfs/opt/gcc/bin/${tool%%:*}"
done

# ---- the tree, as the device tool sends it -----------------------------------------
work="$rootfs/work"
mkdir -p "$work"
rm -rf "$work/kiln" "$work/out" "$work/build-gpu"
mkdir -p "$work/kiln" "$work/out"
# Tracked files and untracked ones git does not ignore, and a build
# directory of its own, from clean (see the top).
(cd "$root" && git ls-files -z -co --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$work/kiln" ||
  { say "FAILED: cannot copy the tree"; exit 1; }
cp -a "$cache/carry" "$work/kiln/.gpu-carry"

# ---- what the root holds ------------------------------------------------------------
awk '/^Package:/{p=$2; ok=0} /^Status:/{ok=/ installed$/} /^Version:/{if (ok) print p" "$2}' \
  "$rootfs/var/lib/dpkg/status" | sort >"$out/root-packages.txt"
say "the root: Debian $suite, debootstrap --variant=minbase --include=$include: $(wc -l <"$out/root-packages.txt") packages:"
awk '{printf "%s%s %s", (NR > 1 ? ", " : "  "), $1, $2} END {print ""}' "$out/root-packages.txt" | fold -s -w 110
for tool in cc c++ gcc g++ cmake ninja python3 pkg-config dpkg mpirun; do
  printf '  %-11s %s\n' "$tool" "$(chroot "$rootfs" /usr/bin/env PATH=/opt/gcc/bin:/usr/bin:/bin /bin/sh -c "command -v $tool" 2>/dev/null || echo "(absent)")"
done
say "pip packages in the root: $(ls -d "$rootfs"/usr/local/lib/python3*/dist-packages/*.dist-info | xargs -n1 basename | tr '\n' ' ')"
say "the CUDA toolkit: $toolkit mounted read-only, $hidden cuDNN/NCCL entries hidden"
say "carried: $(ls "$cache/carry/debs" | tr '\n' ' ')and Fashion-MNIST ($(du -sm "$cache/carry" | cut -f1) MiB)"
say "no network inside (unshare -n); prepared in $((SECONDS - started)) s"

# ---- the run --------------------------------------------------------------------------
budget="${KILN_REHEARSAL_BUDGET:-4800}"
unshare -m -n --fork -- /bin/bash -s "$rootfs" "$toolkit" "$hide" "$budget" >"$out/run.log" 2>&1 <<'INSIDE'
set -eu
R=$1 toolkit=$2 hide=$3 budget=$4
mount --make-rprivate /
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mount --rbind /sys "$R/sys"
mount -t tmpfs tmpfs "$R/tmp"
mkdir -p "$R$toolkit"
if ! mount -t overlay overlay -o "lowerdir=$hide:$toolkit" "$R$toolkit" 2>/dev/null; then
  echo "gpu-rehearsal: overlay unavailable: the toolkit's own cuDNN and NCCL stay visible"
  mount --bind -o ro "$toolkit" "$R$toolkit"
fi
[[ -e $R/usr/local/cuda ]] || ln -s "$toolkit" "$R/usr/local/cuda"
exec chroot "$R" /usr/bin/env -i PATH=/opt/gcc/bin:/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
  KILN_CHECK_BUDGET="$budget" KILN_BUILD_DIR=/work/build-gpu \
  /bin/bash -c 'cd /work/kiln && scripts/gpu-check.sh /work/out env,build,test-safe,test-default,test'
INSIDE
rc=$?
cat "$out/run.log"
cp -a "$work/out/." "$out/" 2>/dev/null

# ---- the verdict ------------------------------------------------------------------------
summary="$work/out/summary.txt"
bad=""
[[ -s $summary ]] || bad="no summary ($out/run.log)"
for stage in env configure build test-safe test-default test; do
  grep -qE "^$stage +passed" "$summary" 2>/dev/null || bad="$bad $stage"
done
# The tests that did not run: GPU halves only, and each other one named.
others="$(sed -n '/The following tests did not run/,$p' "$out/ctest-safe.log" 2>/dev/null |
  grep -E '^[[:space:]]+[0-9]+ - ' | grep -vE '_cuda |_cudnn ' | sed -E 's/^[[:space:]]+[0-9]+ - //')"
if [[ -n $others ]]; then say "not GPU tests, skipped in the root (what they lack is not in the GPU image's promise):"; echo "$others" | sed 's/^/  /'; fi
elapsed=$((SECONDS - started))
if [[ -n $bad || $rc -ne 0 ]]; then
  say "FAILED (gpu-check exit $rc; stages not passed:${bad:- none}) after ${elapsed} s; logs in $out"
  exit 1
fi
say "passed in ${elapsed} s: build and test in the minimal root; logs in $out"
