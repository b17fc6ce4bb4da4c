#!/usr/bin/env bash
# Bulk-copy push merge (own rows read in place) (tree) against e5dd341 (base): the full CUDA
# suite of the tree, memcheck + racecheck on the attention tests, then attention/step A/B.
set -u
cd "$(dirname "$0")/../.."
tar -C .scratch -xzf .scratch/s24b/bins.tgz; B=.scratch/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
timeout -k 10 170 $B/msa_tests_cuda >"$OUT/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$OUT/tests.log" | head
F='SparseAttention*'
for tool in memcheck racecheck; do
  timeout -k 10 150 compute-sanitizer --tool $tool --error-exitcode 99 $B/msa_tests_cuda --gtest_filter="$F" >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$tool.log" | tr '\n' ' ')"
done
WORK=$OUT/ab ROUNDS=3 timeout -k 10 300 bash bench/ab/ab.sh run-bins attention,step $B/op_ab_base $B/op_ab_tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$?"
tar czf "$OUT/ablog.tgz" -C "$OUT" ab tests.log memcheck.log racecheck.log 2>/dev/null; rm -rf "$OUT/ab"
grep -vE "^\s*$" "$OUT/ab.txt" | tail -60
