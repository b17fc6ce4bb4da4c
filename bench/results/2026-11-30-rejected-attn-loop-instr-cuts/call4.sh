#!/usr/bin/env bash
# Call 4: attention main loop instruction cuts. attnbase (07b1c8b), attnAB (row addresses +
# 32-bit tail mask), tree (+ ex2.approx.ftz in the loop).
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 bench/ab/ab.sh run attention,step .scratch/ab/attnbase .scratch/ab/attnAB tree > "$OUT/ab.txt" 2>&1
cp /tmp/msa_ab/ab.log "$OUT/ab.log" 2>/dev/null
grep -E "^op |^attention|^step" "$OUT/ab.txt" | tail -60
echo "total $(( $(date +%s) - t0 )) s"
