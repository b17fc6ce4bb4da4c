#!/usr/bin/env bash
# Session 32, call 3: the prefetch hint as 128-byte line prefetches (prefetch.global.L2) spread
# over the select CTA's threads, narrow tables only. prev = code of c4f774c, lines = working tree
# without the hint, lpf = with it (MSA_AB_PREFETCH=1). Index tests, memcheck on the prefetch
# tests, step A/B (3 rounds).
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s34/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
timeout -k 5 100 $B/msa_tests_cuda_tree --gtest_filter="IndexTopk*:*Index*" >"$L/tests_tree.log" 2>&1
echo "tests_tree (index): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') $(el)"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head
timeout -k 5 60 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="*Prefetch*" >"$L/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$L/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/memcheck.log" | tr '\n' ' ') $(el)"
WORK=$L/ab ROUNDS=3 timeout -k 10 150 bash bench/ab/ab.sh run-bins step $B/op_ab_prev $B/op_ab_lines $B/op_ab_lpf >"$L/ab.txt" 2>&1
echo "ab step rc=$? $(el)"
cp "$L/ab.txt" "$OUT/"
rm -rf "$L/ab"; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
