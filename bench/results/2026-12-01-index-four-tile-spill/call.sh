#!/usr/bin/env bash
# Session 30, call 6: the index score kernel's four-query-tile instances read the sequence
# length in their segment loop again (the early length register made the bf16 head-dim-128 one
# spill in its tile loop); the query fill converts bf16 bits directly (no memcpy temporaries).
# tree = working tree, base = c35c18f. Whole CUDA suite (tree), memcheck on the index tests,
# index and index-shapes A/B (3 rounds). Logs in $OUT/logs.tgz.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s30e/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
timeout -k 5 150 $B/msa_tests_cuda_tree >"$L/tests_tree.log" 2>&1
echo "tests_tree (all): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') $(el)"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head
S="IndexTopk.*:Cases/IndexTopk*:Dtypes/IndexTopk*:CudaConsistency.IndexTopk*:CudaGraphs.IndexTopk*"
timeout -k 5 150 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="$S" >"$L/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$L/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/memcheck.log" | tr '\n' ' ') $(el)"
WORK=$L/ab ROUNDS=3 timeout -k 10 150 bash bench/ab/ab.sh run-bins index,index-shapes,step $B/op_ab_base $B/op_ab_tree >"$L/ab.txt" 2>&1
echo "ab rc=$? $(el)"
rm -rf "$L/ab"; grep -vE "^\s*$" "$L/ab.txt" | grep -A200 "^op " | head -110; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
