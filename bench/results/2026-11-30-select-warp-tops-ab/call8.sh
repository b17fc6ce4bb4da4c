#!/usr/bin/env bash
# Call 8: the select change at 512K with batch 4-16 (cases added to op_ab): selbase (970a58b's
# selection) against the tree, index op only.
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 bench/ab/ab.sh run index .scratch/ab/selbase tree > "$OUT/ab.txt" 2>&1
cp /tmp/msa_ab/ab.log "$OUT/ab.log" 2>/dev/null
grep -E "^op |^index" "$OUT/ab.txt" | tail -45
echo "total $(( $(date +%s) - t0 )) s"
