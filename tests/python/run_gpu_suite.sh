#!/usr/bin/env bash
# Runs the msa PyTorch suite (meant for the GPU machine) so that a crash is reported, not lost:
#   1. the whole suite in one process, with faulthandler (Python traceback on SIGSEGV/SIGABRT);
#   2. if that process dies from a signal (rc > 128, or pytest's own rc for an internal error),
#      each test file is rerun alone with -v, to tell a crash of one file's tests from one that
#      needs earlier tests' state;
#   3. the crashing run is repeated under gdb (when installed) for a native backtrace of the
#      faulting thread: the whole suite when no file crashes alone, else each crashing file.
# Usage (repository root): bash tests/python/run_gpu_suite.sh [extra pytest args]
# Exit status: 0 when the suite passed; otherwise the whole-suite status.
set -u
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
PYTEST=("$PY" -X faulthandler -m pytest -q -p no:cacheprovider)
export PYTHONFAULTHANDLER=1

echo "== msa: whole suite"
"${PYTEST[@]}" tests/python "$@"
rc=$?
echo "== msa: whole suite exit status ${rc}"
if [ "$rc" -le 5 ]; then
  # 0 passed, 1 failures, 2 interrupted, 3 internal error, 4 usage, 5 no tests: no crash.
  exit "$rc"
fi

if [ "$rc" -gt 128 ]; then
  echo "== msa: the suite process died from signal $((rc - 128)); rerunning each file alone"
else
  echo "== msa: unexpected exit status ${rc}; rerunning each file alone"
fi
crashed=()
for file in tests/python/test_*.py; do
  echo "== msa: ${file} alone"
  "${PYTEST[@]}" -v "$file" "$@"
  frc=$?
  echo "== msa: ${file} alone: exit status ${frc}"
  if [ "$frc" -gt 128 ]; then
    crashed+=("$file")
  fi
done

native_backtrace() {
  command -v gdb > /dev/null 2>&1 || { echo "== msa: gdb not installed, no native backtrace"; return; }
  echo "== msa: native backtrace (gdb) of: pytest $*"
  gdb -q -batch -ex "set pagination off" -ex run -ex "bt 50" -ex "info sharedlibrary" \
    --args "$PY" -X faulthandler -m pytest -q -x -p no:cacheprovider "$@" 2>&1 | tail -n 250
}

if [ "${#crashed[@]}" -eq 0 ]; then
  echo "== msa: no file crashes alone: the crash needs state left by earlier tests"
  native_backtrace tests/python "$@"
  exit "$rc"
fi
for file in "${crashed[@]}"; do
  echo "== msa: ${file} crashes alone"
  native_backtrace "$file" "$@"
done
exit "$rc"
