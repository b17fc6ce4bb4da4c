#!/usr/bin/env bash
# Session 28, call 11: the select kernel's warp tournament (tree) against cf38f2d's rank count
# (base): the whole CUDA suite with the tree, memcheck and racecheck on the index tests, then
# the index and step A/B, 2 rounds.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p .scratch/x && tar -C .scratch/x -xzf .scratch/s28k/bins.tgz; B=.scratch/x/bin4
timeout -k 10 150 $B/msa_tests_cuda_tree >"$OUT/tests_tree.log" 2>&1
echo "tests_tree (all): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests_tree.log" | tr '\n' ' ') at $(( $(date +%s) - start )) s"
grep -E '^\[  FAILED' "$OUT/tests_tree.log" | head
S="IndexTopk.*:CudaConsistency.IndexTopk*"
timeout -k 5 60 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="$S" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/memcheck.log" | tr '\n' ' ')"
timeout -k 5 50 compute-sanitizer --tool racecheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="IndexTopk.*" >"$OUT/racecheck.log" 2>&1
echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' "$OUT/racecheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/racecheck.log" | tr '\n' ' ')"
echo "at $(( $(date +%s) - start )) s"
WORK=$OUT/ab ROUNDS=2 timeout -k 10 120 bash bench/ab/ab.sh run-bins index,step $B/op_ab_base $B/op_ab_tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - start )) s"
tar czf "$OUT/logs.tgz" -C "$OUT" ab tests_tree.log memcheck.log racecheck.log 2>/dev/null; rm -rf "$OUT/ab"
grep -vE "^\s*$" "$OUT/ab.txt" | grep -A100 "^op "
