#!/usr/bin/env bash
# Session 33, call 7: the attention kernels' CTA / row prologue and Q scale exponent as shared helpers
# (attn_cta, attn_row, q_scale_exp; same instructions per kernel, scheduled differently). tree =
# working tree, f72 = f728679. Attention / graph tests, attention,attention-layer,step A/B (2 rounds).
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s39/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
timeout -k 5 100 $B/msa_tests_cuda_tree --gtest_filter='*SparseAttention*:CudaGraphs*' >"$L/tests_tree.log" 2>&1
echo "tests_tree: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') $(el)"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head
WORK=$L/ab ROUNDS=2 timeout -k 10 150 bash bench/ab/ab.sh run-bins attention,attention-layer,step $B/op_ab_f72 $B/op_ab_tree >"$L/ab.txt" 2>&1
echo "ab rc=$? $(el)"
cp "$L/ab.txt" "$OUT/"
rm -rf "$L/ab"; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
