#!/usr/bin/env bash
# Session 28, call 4 (diagnostic): globaltimer trace of the in-cluster attention kernel, bulk
# copies (trtree) against register loads (trbase), bf16 and fp8 per-layer at batch 1 and 4.
set -u
cd "$(dirname "$0")/../.."
mkdir -p .scratch/x && tar -C .scratch/x -xzf .scratch/s28d/bins.tgz; B=.scratch/x/tbin
for v in trtree trall; do
  for shape in "8192 1 1" "8192 4 1"; do
    echo "=== $v attention $shape"
    $B/op_ab_$v attention $shape 2>&1 | tail -23
    echo "=== $v attention-layer $shape"
    $B/op_ab_$v attention-layer $shape 2>&1 | tail -23
  done
done > $OUT/trace.txt
grep -E "===|median" $OUT/trace.txt
