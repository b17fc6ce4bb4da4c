#!/usr/bin/env bash
# Call 3 (tree = wip/index-m2-static, experiment S): A/B F (main 6620683) vs S (static e4m3 hd128
# one-tile scorer with 32-key tiles) vs S2 (S + the in-cluster scorer with 32-key tiles).
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 WORK=/tmp/msa_ab bash bench/ab/ab.sh run index,step .scratch/ab/F tree .scratch/ab/S2 >"$OUT/ab.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
tail -70 "$OUT/ab.txt"
cat "$OUT/summary.txt"
