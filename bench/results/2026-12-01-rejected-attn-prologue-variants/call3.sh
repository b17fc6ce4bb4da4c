#!/usr/bin/env bash
# Session 34, call 3: (a) the CUDA suite with the balanced grid's lead units (tree), memcheck on
# the index tests; (b) index A/B: base (HEAD dd7439e index sources + launch policy) against tree;
# (c) attention A/B: tree against bw (the one-block attention kernel for every call it can take,
# not only where one split per entry fits one wave).
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s41c/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
timeout -k 5 200 $B/msa_tests_cuda_tree >"$L/tests_tree.log" 2>&1
echo "tests_tree (all): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') $(el)"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head -20
S="IndexTopk.*:Cases/IndexTopk*:Dtypes/IndexTopk*:CudaConsistency.IndexTopk*:CudaGraphs.IndexTopk*"
timeout -k 5 150 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="$S" >"$L/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$L/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/memcheck.log" | tr '\n' ' ') $(el)"
WORK=$L/ab1 ROUNDS=3 timeout -k 10 200 bash bench/ab/ab.sh run-bins index $B/op_ab_base $B/op_ab_tree >"$L/ab-index.txt" 2>&1
echo "ab index rc=$? $(el)"
WORK=$L/ab2 ROUNDS=3 timeout -k 10 200 bash bench/ab/ab.sh run-bins attention,attention-layer,step $B/op_ab_tree $B/op_ab_bw >"$L/ab-attn.txt" 2>&1
echo "ab attn rc=$? $(el)"
cp $L/ab-index.txt $L/ab-attn.txt $OUT/
python3 bench/ab/abtab.py "$L/ab-index.txt" 2>/dev/null | head -70
python3 bench/ab/abtab.py "$L/ab-attn.txt" 2>/dev/null | head -80
rm -rf "$L/ab1" "$L/ab2"; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
