#!/usr/bin/env bash
# A/B of the sorted-list rank selection (tree) against 2435d90 (base), with the full CUDA test
# suite of the tree and memcheck + racecheck on the selection tests.
set -u
cd "$(dirname "$0")/../.."
B=.scratch/bin
$B/msa_tests_cuda >"$OUT/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$OUT/tests.log" | head
F='IndexTopk.SelectionOverLengthsWidthsAndScoreOrders:IndexTopk.NarrowTablesWithLargeTopk:IndexTopk.FewVisibleBlocksSelectsAll:IndexTopk.ManyDecodeRequestsEitherSelectionPath'
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --error-exitcode 99 $B/msa_tests_cuda --gtest_filter="$F" >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$tool.log" | tr '\n' ' ')"
done
WORK=$OUT/ab ROUNDS=2 bash bench/ab/ab.sh run-bins index,step $B/op_ab_base $B/op_ab_tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$?"
tar czf "$OUT/ablog.tgz" -C "$OUT" ab tests.log memcheck.log racecheck.log && rm -rf "$OUT/ab"
tail -75 "$OUT/ab.txt"
