#!/usr/bin/env bash
# Attention merge: lse with the factors (lse) and in-cluster sums over DSMEM (tree) against
# main (038c94a): attention tests of the tree, the attention / attention-layer / step A/B (three
# rounds), then memcheck and racecheck of the tree's attention tests in the time left.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
tar -C .scratch -xzf .scratch/s26f/bins.tgz; B=.scratch/bin
F='*SparseAttention*:CudaConsistency.SparseAttention*:*Graph*'
timeout -k 10 120 $B/msa_tests_cuda --gtest_filter="$F" >"$OUT/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$OUT/tests.log" | head
WORK=$OUT/ab ROUNDS=3 timeout -k 10 300 bash bench/ab/ab.sh run-bins attention,attention-layer,step $B/op_ab_main $B/op_ab_lse $B/op_ab_tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - start )) s"
for tool in memcheck racecheck; do
  left=$(( 560 - ($(date +%s) - start) )); [ $left -gt 100 ] && left=100
  [ $left -lt 20 ] && { echo "$tool skipped"; continue; }
  timeout -k 5 $left compute-sanitizer --tool $tool --error-exitcode 99 $B/msa_tests_cuda --gtest_filter='SparseAttention*:CudaConsistency.SparseAttention*' >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$tool.log" | tr '\n' ' ')"
done
tar czf "$OUT/logs.tgz" -C "$OUT" ab tests.log memcheck.log racecheck.log 2>/dev/null; rm -rf "$OUT/ab"
grep -vE "^\s*$" "$OUT/ab.txt" | grep -A100 "^op "
