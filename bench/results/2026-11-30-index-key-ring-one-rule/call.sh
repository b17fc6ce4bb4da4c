#!/usr/bin/env bash
# One rule for the key ring (host launch smem from the kernel's own rule; device code unchanged):
# the index tests of the tree, memcheck on the wide-tile balanced test, and op_ab index and
# index-shapes of HEAD (base) and the tree, one round, for the output hashes.
set -u
cd "$(dirname "$0")/../.."
tar -C .scratch -xzf .scratch/s24b/bins.tgz; B=.scratch/bin
timeout -k 10 120 $B/msa_tests_cuda --gtest_filter='*IndexTopk*' >"$OUT/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$OUT/tests.log" | head
timeout -k 10 90 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda --gtest_filter='IndexTopk.ManyRaggedRequestsBalancedGridWideTileInstances:IndexTopk.BalancedGridLongPieces' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/memcheck.log" | tr '\n' ' ')"
WORK=$OUT/ab ROUNDS=1 timeout -k 10 150 bash bench/ab/ab.sh run-bins index,index-shapes $B/op_ab_base $B/op_ab_tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$?"; rm -rf "$OUT/ab"
grep -E "^op |^index" "$OUT/ab.txt" | awk '{print $NF}' | sort | uniq -c
grep -E "^op |^index" "$OUT/ab.txt" | tail -40
