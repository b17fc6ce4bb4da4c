#!/usr/bin/env bash
# Session 27, call 2: the per-token V-scale fix's tests on the old kernel (main = 9cd6a80) and the
# fixed tree, two tail-clamp variants (tail: a warp-uniform branch; tailsel: one index compare),
# sanitizers on the tree, then the attention / step A/B of all four.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p .scratch/x && tar -C .scratch/x -xzf .scratch/s27c/bins.tgz; B=.scratch/x/bin
N='*PowerOfTwoVScales*:*SubnormalScales*:*WideScales*'
timeout -k 10 60 $B/msa_tests_cuda_main --gtest_filter="$N" >"$OUT/tests_old.log" 2>&1
echo "old kernel, new tests: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests_old.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \] [A-Z]' "$OUT/tests_old.log" | head -8
grep -m3 -E "got|Failure" "$OUT/tests_old.log"
F='*SparseAttention*:CudaConsistency.SparseAttention*:*Graph*'
for v in "" _tailsel; do
  timeout -k 10 120 $B/msa_tests_cuda$v --gtest_filter="$F" >"$OUT/tests$v.log" 2>&1
  echo "tests$v: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests$v.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED' "$OUT/tests$v.log" | head
done
WORK=$OUT/ab ROUNDS=3 timeout -k 10 240 bash bench/ab/ab.sh run-bins attention,attention-layer,step $B/op_ab_main $B/op_ab_tree $B/op_ab_tail $B/op_ab_tailsel >"$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - start )) s"
for tool in memcheck racecheck; do
  left=$(( 520 - ($(date +%s) - start) )); [ $left -gt 100 ] && left=100
  [ $left -lt 20 ] && { echo "$tool skipped"; continue; }
  timeout -k 5 $left compute-sanitizer --tool $tool --error-exitcode 99 $B/msa_tests_cuda --gtest_filter='SparseAttention*:CudaConsistency.SparseAttention*' >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$tool.log" | tr '\n' ' ')"
done
tar czf "$OUT/logs.tgz" -C "$OUT" ab tests_old.log tests.log tests_tailsel.log memcheck.log racecheck.log 2>/dev/null; rm -rf "$OUT/ab"
grep -vE "^\s*$" "$OUT/ab.txt" | grep -A100 "^op "
