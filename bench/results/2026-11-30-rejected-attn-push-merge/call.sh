#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=3 JOBS=16 bench/ab/ab.sh run attention,step .scratch/ab/pushbase .scratch/ab/push tree > $OUT/ab4.txt 2>&1
echo "rc=$?"
cp /tmp/msa_ab/ab.log $OUT/ab4.log 2>/dev/null
grep -A60 "^op " $OUT/ab4.txt || tail -40 $OUT/ab4.txt
