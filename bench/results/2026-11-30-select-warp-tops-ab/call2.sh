#!/usr/bin/env bash
# Call 2: warp-tops candidate selection. CUDA tests + sanitizers on the index suites, then the
# same-call A/B against the previous selection (index and step ops).
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
SAN_FILTER='*IndexTopk*' OUT=$OUT/gc JOBS=16 bash scripts/gpu_check.sh build test sanitize
echo "gpu_check $(( $(date +%s) - t0 )) s"
ROUNDS=2 bench/ab/ab.sh run index,step .scratch/ab/selbase tree > "$OUT/ab.txt" 2>&1
cp /tmp/msa_ab/ab.log "$OUT/ab.log" 2>/dev/null
tail -60 "$OUT/ab.txt"
echo "total $(( $(date +%s) - t0 )) s"
