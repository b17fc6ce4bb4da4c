#!/usr/bin/env bash
# A/B of the index op and step: base5 = 41611f5's index sources, tree = the dense balanced
# instance as 384-thread CTAs at two per SM for every balanced e4m3 grid; then the CUDA index
# tests and memcheck / racecheck on the balanced-grid tests.
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 WORK=/tmp/msa_ab bash bench/ab/ab.sh run index,step .scratch/ab/base5 tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
grep -E "^op|fp8" "$OUT/ab.txt" | tail -35
OUT=$OUT/gc JOBS=16 MSA_COMMIT=${C:-wip} bash scripts/gpu_check.sh build >"$OUT/gc_build.txt" 2>&1
echo "build $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
build-gpu/tests/msa_tests_cuda --gtest_filter='*Index*:*Graph*' >"$OUT/cuda_tests.log" 2>&1
echo "index+graph tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda_tests.log" | tr '\n' ' ') $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
grep -E '^\[  FAILED' "$OUT/cuda_tests.log" | head -20 >>"$OUT/summary.txt"
F='*ManyRagged*:*ValuesInBalanced*:*PaddedE4m3*'
for tool in memcheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 99 build-gpu/tests/msa_tests_cuda \
    --gtest_filter="$F" >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1) $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
done
cat "$OUT/summary.txt"
