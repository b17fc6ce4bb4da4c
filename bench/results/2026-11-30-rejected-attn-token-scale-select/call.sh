#!/usr/bin/env bash
# Session 27, call 8: per-token-head e4m3 scales loaded at the rows' own slots, V scales of rows
# past the position replaced by 0 (vsel), instead of clamping the scale slots: attention and graph
# tests with it, memcheck on the attention tests, then the attention A/B against the tree.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p .scratch/x && tar -C .scratch/x -xzf .scratch/s27h/bins.tgz; B=.scratch/x/bin
F='*SparseAttention*:CudaConsistency.SparseAttention*:*Graph*'
timeout -k 10 150 $B/msa_tests_cuda_vsel --gtest_filter="$F" >"$OUT/tests_vsel.log" 2>&1
echo "tests_vsel: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests_vsel.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$OUT/tests_vsel.log" | head
timeout -k 5 120 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_vsel --gtest_filter='SparseAttention*:CudaConsistency.SparseAttention*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/memcheck.log" | tr '\n' ' ')"
WORK=$OUT/ab ROUNDS=3 timeout -k 10 200 bash bench/ab/ab.sh run-bins attention,attention-layer $B/op_ab_tree $B/op_ab_vsel >"$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - start )) s"
tar czf "$OUT/logs.tgz" -C "$OUT" ab tests_vsel.log memcheck.log 2>/dev/null; rm -rf "$OUT/ab"
grep -vE "^\s*$" "$OUT/ab.txt" | grep -A100 "^op "
