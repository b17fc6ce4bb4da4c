#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=3 JOBS=16 bench/ab/ab.sh run index,step .scratch/ab/balbase tree > $OUT/ab7.txt 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
SAN_FILTER='*Balanced*:IndexTopkBadDecodeValues*:*ManyDecodeRequests*' OUT=$OUT/gc JOBS=16 MSA_COMMIT=wip-balanced bash scripts/gpu_check.sh build test sanitize > $OUT/gc_summary.txt 2>&1
echo "gc rc=$? $(( $(date +%s) - t0 )) s"
tar czf $OUT/gc.tgz -C $OUT gc && rm -rf $OUT/gc
grep -A70 "^op " $OUT/ab7.txt | cut -c1-120
tail -15 $OUT/gc_summary.txt
