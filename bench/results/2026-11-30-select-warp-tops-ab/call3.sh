#!/usr/bin/env bash
# Call 3: A/B of the selection: selbase (HEAD), seltops (warp tops on narrow and wide tables),
# tree (warp tops on wide tables only).
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 bench/ab/ab.sh run index,step .scratch/ab/selbase .scratch/ab/seltops tree > "$OUT/ab.txt" 2>&1
cp /tmp/msa_ab/ab.log "$OUT/ab.log" 2>/dev/null
grep -E "^op |^index|^step" "$OUT/ab.txt" | tail -60
echo "total $(( $(date +%s) - t0 )) s"
