#!/usr/bin/env bash
# Session 32, call 8: the merge kernel combines 4 q heads per CTA (blockDim (head_dim, 4)) instead
# of one, so a batch-16 call launches 64 merge CTAs instead of 256. prev = 22a676f (c4f774c's
# code), m4 = working tree. Attention and graph tests, attention/step A/B (3 rounds).
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s38/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
timeout -k 5 120 $B/msa_tests_cuda_tree --gtest_filter="*SparseAttention*:CudaGraphs*:CudaConsistency*" >"$L/tests_tree.log" 2>&1
echo "tests_tree: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') $(el)"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head
WORK=$L/ab ROUNDS=3 timeout -k 10 150 bash bench/ab/ab.sh run-bins attention,step $B/op_ab_prev $B/op_ab_m4 >"$L/ab.txt" 2>&1
echo "ab rc=$? $(el)"
cp "$L/ab.txt" "$OUT/"
rm -rf "$L/ab"; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
