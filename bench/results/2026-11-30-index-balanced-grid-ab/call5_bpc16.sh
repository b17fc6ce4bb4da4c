#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=3 JOBS=16 bench/ab/ab.sh run index,step tree .scratch/ab/bpc16 > $OUT/ab5.txt 2>&1
echo "rc=$?"
grep -A70 "^op " $OUT/ab5.txt || tail -40 $OUT/ab5.txt
