#!/usr/bin/env bash
# A/B of the quad rank count (tree) against 2435d90 (base): the index tests of the tree (every
# stage under a time limit), memcheck + racecheck on the selection tests, then index timings.
set -u
cd "$(dirname "$0")/../.."
B=.scratch/bin
timeout 100 $B/msa_tests_cuda --gtest_filter='*IndexTopk*' >"$OUT/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$OUT/tests.log" | head
F='IndexTopk.SelectionOverLengthsWidthsAndScoreOrders:IndexTopk.NarrowTablesWithLargeTopk'
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 99 $B/msa_tests_cuda --gtest_filter="$F" >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$tool.log" | tr '\n' ' ')"
done
WORK=$OUT/ab ROUNDS=2 timeout 130 bash bench/ab/ab.sh run-bins index $B/op_ab_base $B/op_ab_tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$?"
tar czf "$OUT/ablog.tgz" -C "$OUT" ab tests.log memcheck.log racecheck.log 2>/dev/null; rm -rf "$OUT/ab"
grep -E "^index|^op" "$OUT/ab.txt" | tail -50
