#!/usr/bin/env bash
# e4m3 K/V attention on the f16 path (tree) against d8119f0 (base): the full CUDA suite of the
# tree, memcheck + racecheck on the attention tests, then attention / attention-layer / step A/B.
set -u
cd "$(dirname "$0")/../.."
tar -C .scratch -xzf .scratch/s25/bins.tgz; B=.scratch/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
SECONDS=0
timeout -k 10 220 $B/msa_tests_cuda >"$OUT/tests.log" 2>&1
echo "tests rc=$? ${SECONDS}s $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$OUT/tests.log" | head
F='SparseAttention*:CudaConsistency.SparseAttentionDecodeE4m3F16Path'
for tool in memcheck racecheck; do
  SECONDS=0
  timeout -k 10 120 compute-sanitizer --tool $tool --error-exitcode 99 $B/msa_tests_cuda --gtest_filter="$F" >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? ${SECONDS}s $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$tool.log" | tr '\n' ' ')"
done
SECONDS=0
WORK=$OUT/ab ROUNDS=2 timeout -k 10 240 bash bench/ab/ab.sh run-bins attention,attention-layer,step $B/op_ab_base $B/op_ab_tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$? ${SECONDS}s"
tar czf "$OUT/logs.tgz" -C "$OUT" ab tests.log memcheck.log racecheck.log 2>/dev/null; rm -rf "$OUT/ab"
grep -vE "^\s*$" "$OUT/ab.txt" | tail -75
