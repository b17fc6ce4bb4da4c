#!/usr/bin/env bash
# Session 34, call 6 (recorded in bench/results/2026-12-01-rejected-attn-multi-entry-ctas/): several list entries per one-block attention CTA (16-bit K/V) past one
# wave of one-entry CTAs. The CUDA suite (tree), memcheck and racecheck on the attention and graph
# tests, and the attention + step A/B: mbase (HEAD e02856a's attention sources and launch
# policy) against tree.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s43c/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
timeout -k 5 200 $B/msa_tests_cuda_tree >"$L/tests_tree.log" 2>&1
echo "tests_tree (all): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') $(el)"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head -20
F='*SparseAttention*:CudaGraphs*:CudaConsistency.SparseAttention*'
for tool in memcheck racecheck; do
  timeout -k 5 150 compute-sanitizer --tool $tool --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="$F" >"$L/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/$tool.log" | tr '\n' ' ') $(el)"
done
WORK=$L/ab ROUNDS=3 timeout -k 10 200 bash bench/ab/ab.sh run-bins attention,attention-layer,step $B/op_ab_mbase $B/op_ab_tree >"$L/ab.txt" 2>&1
echo "ab rc=$? $(el)"
cp "$L/ab.txt" "$OUT/"
python3 bench/ab/abtab.py "$L/ab.txt" 2>/dev/null | head -80
rm -rf "$L/ab"; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
