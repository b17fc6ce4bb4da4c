#!/usr/bin/env bash
# Session 29, call 1: the select kernel's warp tournament (tree, wip/select-tournament 62fa045 on
# daf1244) against main's rank count (base): the whole CUDA suite with the tree, memcheck and
# racecheck on the index tests, then the index and step A/B, 3 rounds.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
B=.scratch/s29a/bin
timeout -k 5 120 $B/msa_tests_cuda_tree >"$OUT/tests_tree.log" 2>&1
echo "tests_tree (all): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests_tree.log" | tr '\n' ' ') at $(( $(date +%s) - start )) s"
grep -E '^\[  FAILED|^\[ RUN' "$OUT/tests_tree.log" | tail -3
S="IndexTopk.*:Cases/IndexTopk*:Dtypes/IndexTopk*:CudaConsistency.IndexTopk*:CudaGraphs.IndexTopk*"
timeout -k 5 120 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="$S" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/memcheck.log" | tr '\n' ' ') at $(( $(date +%s) - start )) s"
timeout -k 5 90 compute-sanitizer --tool racecheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="IndexTopk.*:CudaConsistency.IndexTopk*" >"$OUT/racecheck.log" 2>&1
echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' "$OUT/racecheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/racecheck.log" | tr '\n' ' ') at $(( $(date +%s) - start )) s"
WORK=$OUT/ab ROUNDS=3 timeout -k 10 180 bash bench/ab/ab.sh run-bins index,step $B/op_ab_base $B/op_ab_tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - start )) s"
tar czf "$OUT/logs.tgz" -C "$OUT" ab tests_tree.log memcheck.log racecheck.log 2>/dev/null; rm -rf "$OUT/ab"
grep -vE "^\s*$" "$OUT/ab.txt" | grep -A100 "^op "
