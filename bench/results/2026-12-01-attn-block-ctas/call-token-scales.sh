#!/usr/bin/env bash
# Session 33, call 8: the one-block kernel with per-token-head e4m3 scales (tree) against HEAD
# (d70a48a). Attention / graph / consistency tests, memcheck and racecheck on the e4m3 ones,
# attention A/B (2 rounds; op_ab's fp8 attention cases use per-token-head scales).
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s39/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
timeout -k 5 100 $B/msa_tests_cuda_tree --gtest_filter='*SparseAttention*:CudaGraphs*' >"$L/tests_tree.log" 2>&1
echo "tests_tree: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') $(el)"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head
F='*E4m3*:*PerToken*:*SameBits*:CudaConsistency.SparseAttentionDecode8K:CudaConsistency.SparseAttentionDecode32K'
for tool in memcheck racecheck; do
  timeout -k 5 60 compute-sanitizer --tool $tool --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="$F" >"$L/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/$tool.log" | tr '\n' ' ') $(el)"
done
MSA_AB_DTYPE=fp8 WORK=$L/ab ROUNDS=2 timeout -k 10 80 bash bench/ab/ab.sh run-bins attention $B/op_ab_head $B/op_ab_tree >"$L/ab.txt" 2>&1
echo "ab rc=$? $(el)"
cp "$L/ab.txt" "$OUT/"
python3 bench/ab/abtab.py "$L/ab.txt" 2>/dev/null | head -20
rm -rf "$L/ab"; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
