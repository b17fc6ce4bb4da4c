#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the main job
# (`msa run` with its default preset: a small MiniMax-M3 TP4-rank attention stack serving a
# synthetic workload on the CPU, or on the GPU when one is present). Extra arguments go to
# `msa run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMSA_WITH_CUDA="${MSA_WITH_CUDA:-OFF}" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target msa_cli
"$BUILD_DIR/tools/msa" run "$@"
