#!/usr/bin/env bash
# The main job: installs what is missing, builds kiln (Release; with the CUDA
# plugin when nvcc exists) and trains the PyTorch GPU tutorial's model on
# Fashion-MNIST: 784-32-10 with ReLU, cross-entropy, SGD lr 0.1, batches of
# 128, 5 epochs, on the first GPU if there is one, else on the CPU. Then it
# prints the test accuracy.
#
#   scripts/run.sh [kiln train options...]    e.g. --device cpu --epochs 10
#
# Options given here come after the defaults and so override them; see
# `build/tools/kiln train --help`. KILN_DATA points at another dataset copy.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KILN_BUILD_DIR:-$root/build}"

"$root/scripts/install-deps.sh" --core
"$root/scripts/build.sh" kiln_cli

exec "$build/tools/kiln" train \
  --data "${KILN_DATA:-/usr/share/datasets/fashion-mnist}" \
  --device auto \
  --hidden 32 --activation relu \
  --optimizer sgd --lr 0.1 --batch 128 --epochs 5 \
  "$@"
