#!/usr/bin/env bash
# Session 32, call 1: the index scorers' query fill divides the row-head by H with div_u32, and
# the one-tile decode instances load the request's length at request `tile` (no division by the
# query length before the first loads). tree = working tree, prev = c4f774c.
# Whole CUDA suite (tree), memcheck on the index and graph tests, index/step A/B (3 rounds).
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s32/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
timeout -k 5 150 $B/msa_tests_cuda_tree >"$L/tests_tree.log" 2>&1
echo "tests_tree (all): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') $(el)"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head
timeout -k 5 120 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="*Index*:CudaGraphs*" >"$L/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$L/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/memcheck.log" | tr '\n' ' ') $(el)"
WORK=$L/ab ROUNDS=3 timeout -k 10 220 bash bench/ab/ab.sh run-bins index,index-shapes,step $B/op_ab_prev $B/op_ab_tree >"$L/ab.txt" 2>&1
echo "ab rc=$? $(el)"
cp "$L/ab.txt" "$OUT/ab.txt"
rm -rf "$L/ab"; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
