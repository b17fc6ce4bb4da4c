#!/usr/bin/env bash
# The test command of the README: configure, build (host warnings are errors), check formatting,
# and run every CPU-labelled test. GPU tests run on a GPU machine through scripts/gpu_check.sh.
# Environment: BUILD_DIR (default build), MSA_WITH_CUDA (default OFF here; the CUDA backend is
# compiled and tested by gpu_check.sh), JOBS (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

bash scripts/check_format.sh

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMSA_WITH_CUDA="${MSA_WITH_CUDA:-OFF}" -DMSA_WARNINGS_AS_ERRORS=ON
cmake --build "$BUILD_DIR" -j "$JOBS"
ctest --test-dir "$BUILD_DIR" -L cpu --output-on-failure -j "$JOBS" --timeout 900

# PyTorch ops: built and tested when torch is importable here; otherwise skipped with a note
# (scripts/gpu_check.sh runs them on the GPU machine, which has torch).
if python3 -c "import torch" >/dev/null 2>&1; then
  python3 -m pip install -q wheel pytest >/dev/null
  # The extension's CUDA backend follows the C++ build's choice (off unless MSA_WITH_CUDA=ON).
  py_cuda=0
  [ "${MSA_WITH_CUDA:-OFF}" = "ON" ] && py_cuda=1
  MSA_WITH_CUDA=$py_cuda MAX_JOBS=$JOBS python3 -m pip install -q --no-build-isolation --no-deps \
    ./python
  python3 -m pytest -q tests/python
  # The README's integration example, on the CPU (a few seconds).
  python3 examples/engine_integration.py --device cpu
else
  echo "python tests: SKIPPED (torch is not installed; pip install torch to run them)"
fi
