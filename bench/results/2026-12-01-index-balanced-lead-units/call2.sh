#!/usr/bin/env bash
# Session 34, call 2: per-CTA %globaltimer trace of the balanced index score kernel (trace2:
# entry, exit, SM, share, pieces), bf16 and fp8 keys, at the balanced shapes.
set -u
cd "$(dirname "$0")/../.."
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s40d/bins.tgz; B=/tmp/x/bin2
for dt in bf16 fp8; do
  for shape in "131072 16 1" "32768 64 1" "524288 4 1" "131072 64 1"; do
    echo "== trace2 index $dt $shape"; MSA_AB_DTYPE=$dt timeout 60 $B/op_ab_trace2 index,step $shape 2>&1 | grep -E "TRACE|median" | grep -v "^step" | head -60
  done
done 2>&1 | tee $OUT/trace2.txt | head -c 100000 > /dev/null
grep -c TRACE $OUT/trace2.txt
