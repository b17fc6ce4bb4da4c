#!/usr/bin/env bash
# Session 33, call 5: the one-block kernel for e4m3 K/V too (tree); b16 = e82bd08 (16-bit only), prev = dad657e.
# prev = HEAD (dad657e) attention sources + launch policy; tree = working tree. Whole CUDA suite,
# memcheck and racecheck on the attention / graph tests, attention + step A/B (3 rounds).
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s39/bins.tgz; B=/tmp/x/bin
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
WORK=$L/ab ROUNDS=3 timeout -k 10 300 bash bench/ab/ab.sh run-bins attention,attention-layer,step $B/op_ab_prev $B/op_ab_b16 $B/op_ab_tree >"$L/ab.txt" 2>&1
echo "ab rc=$? $(el)"
cp "$L/ab.txt" "$OUT/"
python3 bench/ab/abtab.py "$L/ab.txt" | head -60
rm -rf "$L/ab"; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
