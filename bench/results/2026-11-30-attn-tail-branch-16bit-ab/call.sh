#!/usr/bin/env bash
# Session 27, call 6: the garbage-past-length clamp behind a warp-uniform branch for 16-bit K/V
# only (tail16; e4m3 keeps a select on one index compare): attention and graph tests with it,
# memcheck on the attention tests, then the attention / step A/B against the tree, 3 rounds.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p .scratch/x && tar -C .scratch/x -xzf .scratch/s27f/bins.tgz; B=.scratch/x/bin
F='*SparseAttention*:CudaConsistency.SparseAttention*:*Graph*'
timeout -k 10 150 $B/msa_tests_cuda_tail16 --gtest_filter="$F" >"$OUT/tests_tail16.log" 2>&1
echo "tests_tail16: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests_tail16.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$OUT/tests_tail16.log" | head
timeout -k 5 120 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tail16 --gtest_filter='SparseAttention*:CudaConsistency.SparseAttention*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/memcheck.log" | tr '\n' ' ')"
WORK=$OUT/ab ROUNDS=3 timeout -k 10 240 bash bench/ab/ab.sh run-bins attention,attention-layer,step $B/op_ab_tree $B/op_ab_tail16 >"$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - start )) s"
tar czf "$OUT/logs.tgz" -C "$OUT" ab tests_tail16.log memcheck.log 2>/dev/null; rm -rf "$OUT/ab"
grep -vE "^\s*$" "$OUT/ab.txt" | grep -A100 "^op "
