#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=2 JOBS=16 bench/ab/ab.sh run index,step .scratch/ab/balbase .scratch/ab/balcursor tree > $OUT/ab8.txt 2>&1
echo "ab rc=$?"
grep -A70 "^op " $OUT/ab8.txt | grep -E "^op|fp8" | cut -c1-120
