#!/usr/bin/env bash
# Call 9: warp tops only where 8 warps gather 2 tops each (tree) against up to 4 tops per warp
# (tops4 = HEAD) and 970a58b's selection (selbase), index op.
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 bench/ab/ab.sh run index .scratch/ab/selbase .scratch/ab/tops4 tree > "$OUT/ab.txt" 2>&1
cp /tmp/msa_ab/ab.log "$OUT/ab.log" 2>/dev/null
grep -E "^op |^index" "$OUT/ab.txt" | tail -45
echo "total $(( $(date +%s) - t0 )) s"
