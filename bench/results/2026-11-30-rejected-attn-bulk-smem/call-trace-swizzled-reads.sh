#!/usr/bin/env bash
# Session 28, call 5 (diagnostic): the bulk-copy kernel with shared-memory reads at swizzled
# addresses (trswz: wrong data, the bank pattern a 128-byte swizzle would give) against the bulk
# kernel (trtree) and register loads (trbase): traces at 8K x 1 and 8K x 4, then attention
# timings of the three, 3 rounds.
set -u
cd "$(dirname "$0")/../.."
mkdir -p .scratch/x && tar -C .scratch/x -xzf .scratch/s28e/bins.tgz; B=.scratch/x/tbin
for v in trbase trtree trswz; do
  for shape in "8192 1 1" "8192 4 1"; do
    echo "=== $v attention $shape"
    $B/op_ab_$v attention $shape 2>&1 | tail -23
  done
done > $OUT/trace.txt
grep -E "===|median" $OUT/trace.txt
