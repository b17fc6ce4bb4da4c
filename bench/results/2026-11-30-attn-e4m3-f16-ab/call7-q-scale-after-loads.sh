#!/usr/bin/env bash
# The f16 path's Q scale after the first K/V loads are issued (tree) against 5dec9ae (c5):
# attention tests + memcheck of the tree, then attention-layer / step A/B, three rounds.
set -u
cd "$(dirname "$0")/../.."
tar -C .scratch -xzf .scratch/s25e/bins.tgz; B=.scratch/bin
F='*SparseAttention*:CudaConsistency.SparseAttention*:*Graph*'
timeout -k 10 150 $B/msa_tests_cuda --gtest_filter="$F" >"$OUT/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$OUT/tests.log" | head
for tool in memcheck racecheck; do
  timeout -k 10 100 compute-sanitizer --tool $tool --error-exitcode 99 $B/msa_tests_cuda --gtest_filter='SparseAttention*:CudaConsistency.SparseAttentionDecodeE4m3F16Path' >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$tool.log" | tr '\n' ' ')"
done
WORK=$OUT/ab ROUNDS=3 timeout -k 10 300 bash bench/ab/ab.sh run-bins attention-layer,step $B/op_ab_c5 $B/op_ab_tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$?"
tar czf "$OUT/logs.tgz" -C "$OUT" ab tests.log memcheck.log racecheck.log 2>/dev/null; rm -rf "$OUT/ab"
grep -vE "^\s*$" "$OUT/ab.txt" | grep -A100 "^op "
