#!/usr/bin/env bash
# The attention tests of the tree (with the TP8 e4m3 case), memcheck and racecheck on them.
set -u
cd "$(dirname "$0")/../.."
tar -C .scratch/s25f -xzf .scratch/s25f/bins.tgz; B=.scratch/s25f/bin
F='*SparseAttention*:CudaConsistency.SparseAttention*:*Graph*'
timeout -k 10 150 $B/msa_tests_cuda --gtest_filter="$F" >"$OUT/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ') $(grep -c 'OK \].*Tp8E4m3' "$OUT/tests.log") tp8e4m3-ok"
grep -E '^\[  FAILED' "$OUT/tests.log" | head
for tool in memcheck racecheck; do
  timeout -k 10 100 compute-sanitizer --tool $tool --error-exitcode 99 $B/msa_tests_cuda --gtest_filter='SparseAttention*' >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$tool.log" | tr '\n' ' ')"
done
