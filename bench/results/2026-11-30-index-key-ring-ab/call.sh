#!/usr/bin/env bash
# A/B of the shared-memory key ring (tree) against a2218ae (pieces), plus the CUDA index tests and
# memcheck / racecheck on the balanced-grid tests.
set -u
cd "$(dirname "$0")/../.."
B=.scratch/bin
$B/msa_tests_cuda --gtest_filter='IndexTopk*:LaunchPolicy.*:*Graph*:*Determinis*' >"$OUT/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$OUT/tests.log" | head
F='IndexTopk.BalancedGridLongPieces:IndexTopkBadInput.ValuesInBalancedGrid:IndexTopk.ManyRaggedRequestsBalancedGrid*'
compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda --gtest_filter="$F" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log")"
compute-sanitizer --tool racecheck --error-exitcode 99 $B/msa_tests_cuda --gtest_filter="$F" >"$OUT/racecheck.log" 2>&1
echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' "$OUT/racecheck.log")"
WORK=$OUT/ab ROUNDS=3 bash bench/ab/ab.sh run-bins ${OPS:-index,index-shapes,step} $B/op_ab_pieces $B/op_ab_tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$?"
tar czf "$OUT/ablog.tgz" -C "$OUT" ab && rm -rf "$OUT/ab"
tail -80 "$OUT/ab.txt"
