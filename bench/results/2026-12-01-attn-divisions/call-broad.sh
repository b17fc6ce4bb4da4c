#!/usr/bin/env bash
# Session 31, call 9: runtime divisions off the decode kernels' critical paths (div_u32: a shift
# for power-of-two divisors; the row's request, the visible-block test, the attention kernel's
# KV head, own block and first subtile, the score kernels' last block). tree = working tree,
# prev = 24ec9be. Whole CUDA suite (tree), memcheck on the index and attention tests,
# index/attention/step A/B (3 rounds). Logs in $OUT/logs.tgz.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s31/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
timeout -k 5 150 $B/msa_tests_cuda_tree >"$L/tests_tree.log" 2>&1
echo "tests_tree (all): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') $(el)"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head
timeout -k 5 150 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="IndexTopk*:SparseAttention*:Dtypes/IndexTopkBadDecodeValues*" >"$L/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$L/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/memcheck.log" | tr '\n' ' ') $(el)"
WORK=$L/ab ROUNDS=3 timeout -k 10 200 bash bench/ab/ab.sh run-bins index,attention,step $B/op_ab_prev $B/op_ab_tree >"$L/ab.txt" 2>&1
echo "ab rc=$? $(el)"
rm -rf "$L/ab"; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
