#!/usr/bin/env bash
# Call 4 (tree = wip/index-m2-static-pp, experiment S3): A/B G9 (main 9307c5e) vs S3 (the static
# 32-key-tile instance with two named buffers) vs S4 (S3 for every static plan, no 16-block gate).
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 WORK=/tmp/msa_ab bash bench/ab/ab.sh run index,step .scratch/ab/G9 tree .scratch/ab/S4 >"$OUT/ab.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
tail -70 "$OUT/ab.txt" | grep -E "^op|fp8"
cat "$OUT/summary.txt"
