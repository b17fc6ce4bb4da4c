#!/usr/bin/env bash
# Call 6: index launch policy: blocks per score CTA chosen for one CTA per SM (pol1) against the
# current one-wave-of-resident-CTAs rule (polbase).
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 bench/ab/ab.sh run index,step .scratch/ab/polbase .scratch/ab/pol1 > "$OUT/ab.txt" 2>&1
cp /tmp/msa_ab/ab.log "$OUT/ab.log" 2>/dev/null
grep -E "^op |^index|^step" "$OUT/ab.txt" | tail -60
echo "total $(( $(date +%s) - t0 )) s"
