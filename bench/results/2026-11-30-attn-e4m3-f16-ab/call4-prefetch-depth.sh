#!/usr/bin/env bash
# f16 e4m3 attention with deeper register prefetch: base (d8119f0), f16 (one subtile ahead),
# tree (two ahead), deep3 (three ahead); attention tests + memcheck of the tree first.
set -u
cd "$(dirname "$0")/../.."
tar -C .scratch/s25c -xzf .scratch/s25c/bins.tgz; B=.scratch/s25c/bin
F='*SparseAttention*:CudaConsistency.SparseAttention*:*Graph*'
SECONDS=0
timeout -k 10 150 $B/msa_tests_cuda --gtest_filter="$F" >"$OUT/tests.log" 2>&1
echo "tests rc=$? ${SECONDS}s $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$OUT/tests.log" | head
SECONDS=0
timeout -k 10 100 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda --gtest_filter='SparseAttention*:CudaConsistency.SparseAttentionDecodeE4m3F16Path' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? ${SECONDS}s $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/memcheck.log" | tr '\n' ' ')"
WORK=$OUT/ab ROUNDS=3 timeout -k 10 300 bash bench/ab/ab.sh run-bins attention-layer,step $B/op_ab_base $B/op_ab_f16 $B/op_ab_tree $B/op_ab_deep3 >"$OUT/ab.txt" 2>&1
echo "ab rc=$?"
tar czf "$OUT/logs.tgz" -C "$OUT" ab tests.log memcheck.log 2>/dev/null; rm -rf "$OUT/ab"
grep -vE "^\s*$" "$OUT/ab.txt" | grep -A100 "^op "
