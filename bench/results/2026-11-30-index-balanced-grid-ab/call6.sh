#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=3 JOBS=16 bench/ab/ab.sh run index,step .scratch/ab/balbase tree > $OUT/ab6.txt 2>&1
echo "rc=$?"
grep -A70 "^op " $OUT/ab6.txt || tail -60 $OUT/ab6.txt
