#!/usr/bin/env bash
# Session 34, call 10 (recorded in bench/results/2026-12-01-rejected-attn-split-mma-chains/): the one-block attention kernel with its MMA chains split into even and odd
# k-step accumulators and the normalisation before P.V (tree) against HEAD's kernel (base):
# attention and graph tests, memcheck on them, and the attention + step A/B (3 rounds).
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s47c/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
F='*SparseAttention*:CudaGraphs*:CudaConsistency.SparseAttention*'
timeout -k 5 90 $B/msa_tests_cuda_tree --gtest_filter="$F" >"$L/tests_tree.log" 2>&1
echo "tests_tree ($F): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') $(el)"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head -20
timeout -k 5 70 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter='*SparseAttention*' >"$L/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$L/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/memcheck.log" | tr '\n' ' ') $(el)"
WORK=$L/ab ROUNDS=3 timeout -k 10 110 bash bench/ab/ab.sh run-bins attention,attention-layer,step $B/op_ab_base $B/op_ab_tree >"$L/ab.txt" 2>&1
echo "ab rc=$? $(el)"
cp "$L/ab.txt" "$OUT/"
python3 bench/ab/abtab.py "$L/ab.txt" 2>/dev/null | head -80
rm -rf "$L/ab"; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
