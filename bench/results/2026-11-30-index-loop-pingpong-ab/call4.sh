#!/usr/bin/env bash
# Session 19 call 4: same-call A/B of the index op (main's index sources vs the tree =
# the hoisted-epilogue ping-pong scorer loop) (A/B only).
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 WORK=/tmp/msa_ab bash bench/ab/ab.sh run index,step .scratch/ab/main .scratch/ab/D tree .scratch/ab/G >"$OUT/ab.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
tail -75 "$OUT/ab.txt"
cat "$OUT/summary.txt"
