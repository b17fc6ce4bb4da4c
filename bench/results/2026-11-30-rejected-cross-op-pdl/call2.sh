#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=3 JOBS=16 bench/ab/ab.sh run step .scratch/ab/pdl0 .scratch/ab/allend .scratch/ab/fusedend .scratch/ab/selend tree > $OUT/ab2.txt 2>&1
echo "rc=$?"
cp /tmp/msa_ab/ab.log $OUT/ab2.log 2>/dev/null
grep -A40 "^op " $OUT/ab2.txt
