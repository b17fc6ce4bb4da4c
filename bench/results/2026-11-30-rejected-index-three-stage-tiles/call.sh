#!/usr/bin/env bash
# A/B of the index op: base5 = 41611f5's index sources, tree = three-stage tile loop for the
# e4m3 one-n-tile scorers at two CTAs per SM.
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 WORK=/tmp/msa_ab bash bench/ab/ab.sh run index .scratch/ab/base5 tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
grep -E "^op|fp8" "$OUT/ab.txt" | tail -23
cat "$OUT/summary.txt"
