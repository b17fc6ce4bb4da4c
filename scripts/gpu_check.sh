#!/usr/bin/env bash
# One call on the GPU machine: build with the CUDA backend, run the CUDA tests, compute-sanitizer
# memcheck and racecheck on a reduced case set, check the machine code is sm_90a, optionally the
# benchmarks and the Python tests, and print a short summary table last.
#
#   scripts/gpu_check.sh [stage ...]     stages: build test sanitize sass python engine prefill
#                                        decode vllm pack (default: build test sanitize sass)
#
# prefill: bench/prefill_bench.py (after python, which installs the extension) with
# PREFILL_ARGS; its table is the summary's last block. decode: bench/decode_bench.py with
# DECODE_ARGS, then the same with --batch-invariant, and bench/compare_runs.py of the two (the
# batch-invariant mode's cost). vllm: tests/python/vllm_gpu_driver.py replay of VLLM_STEPS (a
# recording made with vLLM on a CPU machine and carried; default .carry/vllm_steps.pt.gz).
# TEST_FILTER narrows the test stage (a --gtest_filter pattern; default all).
#
# pack (last): the summary goes to $OUT/summary.txt and every other file under $OUT into
# $OUT/logs.tgz, for transports that bring back only a few files (give OUT a folder of its own).
# Host warnings are not errors here: the GPU machine has a newer g++ than CI, whose -Werror
# build is the authority on warnings. Logs go to $OUT (default ./gpu_check_out). GoogleTest is
# taken from .gtest/ (a copy of Debian's /usr/src/googletest carried to the machine) when no
# system GTest exists; nlohmann/json and CLI11 likewise from .deps/prefix (made by
# `scripts/install_deps.sh --stage-headers`, carried) when the machine has neither.
# STAGE_TIMEOUT (seconds, default 300) limits each test and sanitizer run.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
# Time limit of each test and sanitizer run, in seconds: a kernel that hangs (a warp shuffle some
# lanes skip) then fails its stage instead of taking the whole device call and its logs with it.
# All of them together, with the engine run, took ~330 s on the H200 at 6569654.
STAGE_TIMEOUT=${STAGE_TIMEOUT:-300}
if ! [[ "$STAGE_TIMEOUT" =~ ^[1-9][0-9]*$ ]]; then
  echo "gpu_check.sh: STAGE_TIMEOUT must be a positive number of seconds, got '$STAGE_TIMEOUT'" >&2
  exit 2
fi
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(build test sanitize sass)
declare -a SUMMARY=()
record() { SUMMARY+=("$(printf '%-10s %-6s %s' "$1" "$2" "$3")"); }
has_stage() { local s; for s in "${STAGES[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
# Whether exit status $1 is timeout's (124: the limit; 137: killed after the -k grace period).
timed_out() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }
# The last test a gtest log $1 started (the one running when a stage timed out).
last_test() { grep -E '^\[ RUN' "$1" | tail -1 | sed 's/^\[ RUN *\] //'; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv \
  >"$OUT/gpu.txt" 2>&1 || true
echo "${MSA_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" >"$OUT/commit.txt"

if has_stage build; then
  gtest_flag=()
  [ -f /usr/include/gtest/gtest.h ] || gtest_flag=(-DMSA_GTEST_SOURCE_DIR="${GTEST_DIR:-$PWD/.gtest}")
  start=$(date +%s)
  if cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMSA_WITH_CUDA=ON \
      -DMSA_WARNINGS_AS_ERRORS=OFF "${gtest_flag[@]}" >"$OUT/build.log" 2>&1 &&
     cmake --build "$BUILD_DIR" -j "$JOBS" >>"$OUT/build.log" 2>&1; then
    record build ok "$(( $(date +%s) - start )) s"
  else
    record build FAIL "see build.log"
    tail -40 "$OUT/build.log"
  fi
fi

TEST_BIN="$BUILD_DIR/tests/msa_tests_cuda"
if has_stage test && [ -x "$TEST_BIN" ]; then
  timeout -k 10 "$STAGE_TIMEOUT" "$TEST_BIN" --gtest_output=xml:"$OUT/cuda_tests.xml" \
    --gtest_filter="${TEST_FILTER:-*}" >"$OUT/cuda_tests.log" 2>&1
  rc=$?
  line=$(grep -E '^\[  (PASSED|FAILED) ' "$OUT/cuda_tests.log" | tr '\n' ' ')
  skipped=$(grep -cE '^\[  SKIPPED \]' "$OUT/cuda_tests.log")
  if timed_out $rc; then
    record cuda-tests FAIL "timed out after $STAGE_TIMEOUT s in $(last_test "$OUT/cuda_tests.log")"
  elif [ $rc -eq 0 ]; then
    record cuda-tests ok "$line skipped-lines=$skipped"
  else
    record cuda-tests FAIL "$line"
  fi
  grep -E '^\[  FAILED  \]' "$OUT/cuda_tests.log" | head -30
  timeout -k 10 "$STAGE_TIMEOUT" "$BUILD_DIR/tests/msa_tests_cpu" >"$OUT/cpu_tests.log" 2>&1
  rc=$?
  if timed_out $rc; then
    record cpu-tests FAIL "timed out after $STAGE_TIMEOUT s in $(last_test "$OUT/cpu_tests.log")"
  elif [ $rc -eq 0 ]; then
    record cpu-tests ok "$(grep -E '^\[  PASSED' "$OUT/cpu_tests.log")"
  else
    record cpu-tests FAIL "$(grep -E '^\[  FAILED' "$OUT/cpu_tests.log" | head -3 | tr '\n' ' ')"
  fi
fi

# Reduced case set for the sanitizers: the graph, misc and shared op suites minus the longest
# contexts (the sanitizers slow kernels down by two orders of magnitude).
SAN_FILTER=${SAN_FILTER:-'-*Long*:*64K*:*128K*:*Consistency*'}
if has_stage sanitize && [ -x "$TEST_BIN" ]; then
  for tool in memcheck racecheck; do
    timeout -k 10 "$STAGE_TIMEOUT" compute-sanitizer --tool "$tool" --error-exitcode 99 \
      --print-limit 20 "$TEST_BIN" --gtest_filter="$SAN_FILTER" >"$OUT/sanitize_$tool.log" 2>&1
    rc=$?
    summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | tail -1)
    # Exit code 99 is the sanitizer's own finding, 124 or 137 the time limit; other non-zero
    # codes are test failures, which the test stage reports.
    if timed_out $rc; then
      record "$tool" FAIL "timed out after $STAGE_TIMEOUT s in $(last_test "$OUT/sanitize_$tool.log")"
    elif [ $rc -ne 99 ]; then
      record "$tool" ok "$summary (tests rc=$rc)"
    else
      record "$tool" FAIL "$summary"
    fi
  done
fi

if has_stage sass; then
  lib="$BUILD_DIR/libmsa.a"
  if [ -f "$lib" ]; then
    cuobjdump --list-elf "$lib" >"$OUT/sass_elf.txt" 2>&1
    cuobjdump --dump-resource-usage "$lib" >"$OUT/sass_resources.txt" 2>&1
    # SASS instructions per kernel, largest first: a kernel that starts with cold instruction
    # caches pays for the code it runs (bench/EXPERIMENTS.md: 2026-12-01-select-narrow-kernel).
    cuobjdump -sass "$lib" 2>/dev/null |
      awk '/Function : /{f=$3} /\/\*[0-9a-f]+\*\//{n[f]++} END{for (k in n) print n[k], k}' |
      sort -rn >"$OUT/sass_sizes.txt"
    n_elf=$(grep -c 'sm_' "$OUT/sass_elf.txt")
    n_other=$(grep 'sm_' "$OUT/sass_elf.txt" | grep -vc 'sm_90a')
    n_kern=$(grep -c 'Function ' "$OUT/sass_resources.txt")
    spills=$(grep -Eo 'STACK:[0-9]+' "$OUT/sass_resources.txt" | grep -vc 'STACK:0')
    [ "$n_other" -eq 0 ] && [ "$n_elf" -gt 0 ] &&
      record sass ok "$n_elf cubins all sm_90a, $n_kern kernels, $spills with stack" ||
      record sass FAIL "$n_other non-sm_90a cubins of $n_elf"
  else
    record sass FAIL "no $lib"
  fi
fi

if has_stage python && [ -f python/setup.py ]; then
  (MAX_JOBS=$JOBS python3 -m pip install --no-build-isolation --no-deps -q ./python \
     >"$OUT/python_install.log" 2>&1 &&
   python3 -m pytest -q tests/python >"$OUT/python_tests.log" 2>&1 &&
   python3 examples/engine_integration.py --device cuda >>"$OUT/python_tests.log" 2>&1)
  rc=$?
  [ $rc -eq 0 ] && record python ok "$(tail -1 "$OUT/python_tests.log")" ||
    record python FAIL "$(tail -1 "$OUT/python_tests.log" 2>/dev/null)"
fi

if has_stage engine && [ -x "$BUILD_DIR/tools/msa" ]; then
  timeout 300 "$BUILD_DIR/tools/msa" run --preset minimax-m3-tp4 --backend cuda \
    ${ENGINE_ARGS:-} --report "$OUT/engine_tp4.json" >"$OUT/engine_tp4.txt" 2>&1 &&
    record engine ok "engine_tp4.txt" || record engine FAIL "see engine_tp4.txt"
fi

if has_stage prefill; then
  start=$(date +%s)
  timeout -k 10 "${PREFILL_TIMEOUT:-420}" python3 bench/prefill_bench.py --out "$OUT/prefill" \
    ${PREFILL_ARGS:-} >"$OUT/prefill_bench.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] && record prefill ok "$(( $(date +%s) - start )) s, checks ok" ||
    record prefill FAIL "rc=$rc, see prefill_bench.log"
fi

if has_stage decode; then
  start=$(date +%s)
  timeout -k 10 "${DECODE_TIMEOUT:-300}" python3 bench/decode_bench.py --out "$OUT/decode" \
    ${DECODE_ARGS:-} >"$OUT/decode_bench.log" 2>&1 &&
    timeout -k 10 "${DECODE_TIMEOUT:-300}" python3 bench/decode_bench.py --batch-invariant \
      --out "$OUT/decode_inv" ${DECODE_ARGS:-} >"$OUT/decode_bench_inv.log" 2>&1
  rc=$?
  python3 bench/compare_runs.py "$OUT/decode/decode_bench.json" \
    "$OUT/decode_inv/decode_bench.json" >"$OUT/batch_invariant_cost.txt" 2>&1
  [ $rc -eq 0 ] && record decode ok "$(( $(date +%s) - start )) s, cost in batch_invariant_cost.txt" ||
    record decode FAIL "rc=$rc, see decode_bench*.log"
fi

if has_stage vllm; then
  steps=${VLLM_STEPS:-.carry/vllm_steps.pt.gz}
  if [ -f "$steps" ]; then
    timeout -k 10 "$STAGE_TIMEOUT" python3 tests/python/vllm_gpu_driver.py replay --cases "$steps" \
      --out "$OUT/vllm_gpu.json" >"$OUT/vllm_gpu.log" 2>&1 &&
      record vllm ok "$(tail -1 "$OUT/vllm_gpu.log")" || record vllm FAIL "$(tail -1 "$OUT/vllm_gpu.log")"
  else
    record vllm FAIL "no recording at $steps (vllm_gpu_driver.py record, on a machine with vLLM)"
  fi
fi

print_summary() {
  echo
  echo "== gpu_check summary ($(cat "$OUT/commit.txt" 2>/dev/null | cut -c1-12)) =="
  head -2 "$OUT/gpu.txt" | tail -1
  for row in "${SUMMARY[@]}"; do echo "$row"; done
  if [ -f "$OUT/prefill/prefill.md" ]; then
    echo
    tail -n +5 "$OUT/prefill/prefill.md"
  fi
}
print_summary

if has_stage pack; then
  print_summary >"$OUT/summary.txt"
  (cd "$OUT" && find . -type f ! -name summary.txt ! -name logs.tgz -print0 |
     tar czf logs.tgz --null -T - --remove-files)
fi
