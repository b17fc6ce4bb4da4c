#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=2 JOBS=16 bench/ab/ab.sh run step,attention,index .scratch/ab/pdl0 .scratch/ab/nopdl .scratch/ab/selend tree > $OUT/ab.txt 2>&1
rc=$?
cp /tmp/msa_ab/ab.log $OUT/ab.log 2>/dev/null
tail -5 /tmp/msa_ab/build_*.log > $OUT/builds.txt 2>&1
echo "rc=$rc"
tail -120 $OUT/ab.txt
