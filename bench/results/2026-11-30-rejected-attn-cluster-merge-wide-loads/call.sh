#!/usr/bin/env bash
# Session 28, call 9: the in-cluster merge with one warp per head, 16-byte distributed-shared-memory loads and one log2-sum-exp fetch per split and warp
# (tree) against 9475112 (base): attention, graph and consistency tests with the tree, memcheck
# and racecheck on the attention tests, then the attention / step A/B, 3 rounds.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p .scratch/x && tar -C .scratch/x -xzf .scratch/s28i/bins.tgz; B=.scratch/x/bin2
F='*SparseAttention*:CudaConsistency.SparseAttention*:*Graph*'
timeout -k 10 150 $B/msa_tests_cuda_tree --gtest_filter="$F" >"$OUT/tests_tree.log" 2>&1
echo "tests_tree: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests_tree.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$OUT/tests_tree.log" | head
S='SparseAttention*:CudaConsistency.SparseAttention*'
timeout -k 5 120 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="$S" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/memcheck.log" | tr '\n' ' ')"
timeout -k 5 120 compute-sanitizer --tool racecheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="SparseAttention*" >"$OUT/racecheck.log" 2>&1
echo "racecheck rc=$? $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/racecheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/racecheck.log" | tr '\n' ' ')"
echo "at $(( $(date +%s) - start )) s"
WORK=$OUT/ab ROUNDS=3 timeout -k 10 240 bash bench/ab/ab.sh run-bins attention,attention-layer,step $B/op_ab_base $B/op_ab_tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - start )) s"
tar czf "$OUT/logs.tgz" -C "$OUT" ab tests_tree.log memcheck.log racecheck.log 2>/dev/null; rm -rf "$OUT/ab"
grep -vE "^\s*$" "$OUT/ab.txt" | grep -A100 "^op "
