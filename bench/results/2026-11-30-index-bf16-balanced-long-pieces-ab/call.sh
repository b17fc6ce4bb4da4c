#!/usr/bin/env bash
# A/B of the balanced grid for bf16 keys with one query n-tile (tree) against 6569654 (s22base),
# with the full CUDA test suite of the tree and memcheck on the balanced bad-value test.
set -u
cd "$(dirname "$0")/../.."
B=.scratch/bin
$B/msa_tests_cuda >"$OUT/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$OUT/tests.log" | head
compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda --gtest_filter='IndexTopkBadInput.ValuesInBalancedGrid' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log")"
WORK=$OUT/ab ROUNDS=2 bash bench/ab/ab.sh run-bins index,step $B/op_ab_s22base $B/op_ab_tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$?"
tar czf "$OUT/ablog.tgz" -C "$OUT" ab && rm -rf "$OUT/ab"
grep -E "bf16|op " "$OUT/ab.txt" | grep -v " ctx " | tail -40
