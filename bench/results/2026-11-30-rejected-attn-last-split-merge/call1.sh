#!/usr/bin/env bash
# Session 27, call 4: EXPERIMENT, split-K partials merged by the last split of each (row, head
# chunk) to finish (counter in a static device array) instead of the merge kernel: attention and
# graph tests with it, then the attention / step A/B against the tree.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p .scratch/x && tar -C .scratch/x -xzf .scratch/s27d/bins.tgz; B=.scratch/x/bin
F='*SparseAttention*:CudaConsistency.SparseAttention*:*Graph*'
timeout -k 10 150 $B/msa_tests_cuda_last --gtest_filter="$F" >"$OUT/tests_last.log" 2>&1
echo "tests_last: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests_last.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$OUT/tests_last.log" | head
WORK=$OUT/ab ROUNDS=3 timeout -k 10 240 bash bench/ab/ab.sh run-bins attention,attention-layer,step $B/op_ab_tree $B/op_ab_last >"$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - start )) s"
tar czf "$OUT/logs.tgz" -C "$OUT" ab tests_last.log 2>/dev/null; rm -rf "$OUT/ab"
grep -vE "^\s*$" "$OUT/ab.txt" | grep -A100 "^op "
