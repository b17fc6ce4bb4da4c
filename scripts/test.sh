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

# The Python package (PyTorch ops, plots): built and tested in a virtual environment, $MSA_VENV
# (default .venv in the repository, git-ignored), created when missing, so that no Python of the
# user's is changed. torch (about 5 GB) is not installed here: the environment's own torch is used
# (CI installs it there, see .ci/run), else python3's, which the environment then sees through a
# .pth file. With neither, the Python tests are skipped with a note.
VENV=${MSA_VENV:-$PWD/.venv}
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1 &&
  torch_dir=$(python3 -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))" \
    2>/dev/null); then
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  site=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$torch_dir" >"$site/_msa_torch_of_python3.pth"
fi
if "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  py=$VENV/bin/python
  # The extension's CUDA backend follows the C++ build's choice (off unless MSA_WITH_CUDA=ON).
  py_cuda=0
  [ "${MSA_WITH_CUDA:-OFF}" = "ON" ] && py_cuda=1
  "$py" -m pip install -q setuptools wheel
  MSA_WITH_CUDA=$py_cuda MAX_JOBS=$JOBS "$py" -m pip install -q --no-build-isolation \
    "./python[tests]"
  # The plot tests also draw through `msa report --plot` with this build's program.
  MSA_CLI="$(cd "$BUILD_DIR" && pwd)/tools/msa" "$py" -m pytest -q tests/python
  # The README's integration example, on the CPU (a few seconds).
  "$py" examples/engine_integration.py --device cpu
else
  echo "python tests: SKIPPED (torch imports neither in $VENV nor in python3; to run them:" \
    "python3 -m venv $VENV && $VENV/bin/pip install torch)"
fi
