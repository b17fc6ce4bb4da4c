#!/usr/bin/env bash
# The vLLM plugin's tests (tests/python/test_vllm_plugin.py, docs/vllm.md) with the real vLLM on
# the CPU. vLLM pins its own torch, so it lives in a virtual environment of its own, kept between
# runs on this machine (about 9.5 GB; its first install takes minutes). The msa wheel is built
# once with the main interpreter's torch and installed into it unchanged: the extension uses
# torch's stable ABI. Skipped, with a note, without torch or without the disk for vLLM.
# Environment: PYTHON (the interpreter with torch that builds the wheel; default the Python of
# the environment scripts/test.sh uses, $MSA_VENV or .venv, when it exists, else python3),
# MSA_VLLM_VENV (default /var/cache/msa/vllm-<version>), JOBS (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_VERSION=0.33.0
TEST_VENV=${MSA_VENV:-$PWD/.venv}
if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ -x "$TEST_VENV/bin/python" ]; then
  PY=$TEST_VENV/bin/python
else
  PY=python3
fi
VENV=${MSA_VLLM_VENV:-/var/cache/msa/vllm-$VLLM_VERSION}
JOBS=${JOBS:-$(nproc)}

if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "vllm plugin tests: SKIPPED (torch is not installed for $PY)"
  exit 0
fi
if ! "$VENV/bin/python" -c "import sys, vllm; sys.exit(vllm.__version__ != '$VLLM_VERSION')" \
  >/dev/null 2>&1; then
  mkdir -p "$(dirname "$VENV")"
  free_kb=$(df -Pk "$(dirname "$VENV")" | awk 'NR == 2 { print $4 }')
  if [ "$free_kb" -lt $((14 * 1024 * 1024)) ]; then
    echo "vllm plugin tests: SKIPPED (less than 14 GiB free for vLLM's environment in $VENV)"
    exit 0
  fi
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --no-cache-dir "vllm==$VLLM_VERSION" pytest
fi

wheel_dir=$(mktemp -d)
trap 'rm -rf "$wheel_dir"' EXIT
MSA_WITH_CUDA=0 MAX_JOBS=$JOBS "$PY" -m pip wheel -q --no-build-isolation --no-deps \
  -w "$wheel_dir" ./python
"$VENV/bin/python" -m pip install -q --no-deps --force-reinstall "$wheel_dir"/*.whl
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/python/test_vllm_plugin.py
