#!/usr/bin/env bash
# Diagnostic: per-CTA globaltimer trace of the attention kernel, wide CTAs (trw) against 4 warps (trm).
set -u
cd "$(dirname "$0")/../.."
tar -C .scratch -xzf .scratch/s26d/bins.tgz; B=.scratch/bin
for v in trm trw; do
  for shape in "8192 1 1" "131072 1 1" "8192 4 1"; do
    echo "=== $v attention $shape"
    $B/op_ab_$v attention $shape 2>&1 | tail -21
    echo "=== $v attention-layer $shape"
    $B/op_ab_$v attention-layer $shape 2>&1 | tail -21
  done
done > $OUT/trace.txt
grep -E "===|median|span" $OUT/trace.txt
