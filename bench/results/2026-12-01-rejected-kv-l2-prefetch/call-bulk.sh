#!/usr/bin/env bash
# Session 32, call 2: the index op's L2 prefetch hint (IndexTopkDecodeArgs::prefetch_kv). prev =
# 8e2f (code of c4f774c), tree = working tree without the hint, pf = tree with the hint in the
# step (MSA_AB_PREFETCH=1). CUDA suite (tree), memcheck on the index tests, step A/B of the three
# and index A/B of prev/tree (3 rounds).
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s33/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
timeout -k 5 150 $B/msa_tests_cuda_tree >"$L/tests_tree.log" 2>&1
echo "tests_tree (all): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') $(el)"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head
timeout -k 5 100 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="*Prefetch*:IndexTopk.Many*:IndexTopk.LongContextDecode:IndexTopkBadInput.*" >"$L/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$L/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/memcheck.log" | tr '\n' ' ') $(el)"
WORK=$L/ab ROUNDS=3 timeout -k 10 150 bash bench/ab/ab.sh run-bins step $B/op_ab_prev $B/op_ab_tree $B/op_ab_pf >"$L/ab.txt" 2>&1
echo "ab step rc=$? $(el)"
WORK=$L/ab2 ROUNDS=2 timeout -k 10 120 bash bench/ab/ab.sh run-bins index $B/op_ab_prev $B/op_ab_tree >"$L/ab-index.txt" 2>&1
echo "ab index rc=$? $(el)"
cp "$L/ab.txt" "$L/ab-index.txt" "$OUT/"
rm -rf "$L/ab" "$L/ab2"; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
