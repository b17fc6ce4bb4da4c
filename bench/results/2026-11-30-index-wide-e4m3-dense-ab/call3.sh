#!/usr/bin/env bash
# A/B of the index op: old = HEAD, wide, bal3 (balanced at 3 CTAs/SM), balmid (bal3 + balanced grid for 8+ block static CTAs).
# e4m3 one-n-tile scorers (head dim <= 128).
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 WORK=/tmp/msa_ab bash bench/ab/ab.sh run index,step .scratch/ab/old .scratch/ab/wide .scratch/ab/bal3 .scratch/ab/balmid >"$OUT/ab.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
tail -50 "$OUT/ab.txt"
cat "$OUT/summary.txt"
