#!/usr/bin/env bash
# Garbage past a request's length: the new NaN tests against the old kernel (main, 8752a3d's
# library) and the fixed one (tree), sanitizers on the tree, then the attention / step A/B.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
tar -C .scratch -xzf .scratch/s26h/bins.tgz; B=.scratch/bin
N='*NanPastLength*:*GarbagePastLength*'
timeout -k 10 60 $B/msa_tests_cuda_old --gtest_filter="$N" >"$OUT/tests_old.log" 2>&1
echo "old kernel, NaN tests: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests_old.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \] [A-Z]' "$OUT/tests_old.log" | head -8
F='*SparseAttention*:CudaConsistency.SparseAttention*:*Graph*'
timeout -k 10 120 $B/msa_tests_cuda --gtest_filter="$F" >"$OUT/tests.log" 2>&1
echo "tree: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$OUT/tests.log" | head
WORK=$OUT/ab ROUNDS=3 timeout -k 10 200 bash bench/ab/ab.sh run-bins attention,attention-layer,step $B/op_ab_main $B/op_ab_tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - start )) s"
for tool in memcheck racecheck; do
  left=$(( 400 - ($(date +%s) - start) )); [ $left -gt 100 ] && left=100
  [ $left -lt 20 ] && { echo "$tool skipped"; continue; }
  timeout -k 5 $left compute-sanitizer --tool $tool --error-exitcode 99 $B/msa_tests_cuda --gtest_filter='SparseAttention*:CudaConsistency.SparseAttention*' >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$tool.log" | tr '\n' ' ')"
done
tar czf "$OUT/logs.tgz" -C "$OUT" ab tests_old.log tests.log memcheck.log racecheck.log 2>/dev/null; rm -rf "$OUT/ab"
grep -vE "^\s*$" "$OUT/ab.txt" | grep -A100 "^op "
