#!/usr/bin/env bash
# Session 28, call 2 (diagnostic): globaltimer trace of the in-cluster attention kernel, bulk
# copies (trtree) against register loads (trbase), bf16 and fp8 per-layer at batch 1 and 4.
set -u
cd "$(dirname "$0")/../.."
mkdir -p .scratch/x && tar -C .scratch/x -xzf .scratch/s28b/bins.tgz; B=.scratch/x/tbin
for v in trbase trtree; do
  for shape in "8192 1 1" "8192 4 1"; do
    echo "=== $v attention $shape"
    $B/op_ab_$v attention $shape 2>&1 | tail -19
    echo "=== $v attention-layer $shape"
    $B/op_ab_$v attention-layer $shape 2>&1 | tail -19
  done
done > $OUT/trace.txt
grep -E "===|median" $OUT/trace.txt
