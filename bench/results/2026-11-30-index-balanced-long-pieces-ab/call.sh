#!/usr/bin/env bash
# A/B of balanced-grid pieces of up to 256 blocks (tree) against 2d60c8a (base), plus the CUDA
# tests of the balanced grid and memcheck on them.
set -u
cd "$(dirname "$0")/../.."
B=.scratch/bin
$B/msa_tests_cuda --gtest_filter='IndexTopk.*Balanced*:IndexTopkBadInput.*:LaunchPolicy.*:IndexTopk.LongStatic*' >"$OUT/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda --gtest_filter='IndexTopk.BalancedGridLongPieces:IndexTopkBadInput.ValuesInBalancedGrid:IndexTopk.ManyRaggedRequestsBalancedGrid' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log")"
WORK=$OUT/ab ROUNDS=3 bash bench/ab/ab.sh run-bins index,step $B/op_ab_base $B/op_ab_tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$?"
tar czf "$OUT/ablog.tgz" -C "$OUT" ab && rm -rf "$OUT/ab"
cat "$OUT/ab.txt" | tail -60
