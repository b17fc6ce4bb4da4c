#!/usr/bin/env bash
# Session 28, call 6 (diagnostic): stamps inside process() of the register-load attention kernel
# (trproc: warp w of CTA 0, per subtile: entry, after QK^T, after the softmax, after P.V).
set -u
cd "$(dirname "$0")/../.."
mkdir -p .scratch/x && tar -C .scratch/x -xzf .scratch/s28f/bins.tgz; B=.scratch/x/tbin
for shape in "8192 1 1" "8192 4 1" "8192 16 1" "8192 64 1"; do
  echo "=== trproc attention $shape"
  $B/op_ab_trproc attention $shape 2>&1 | tail -30
done > $OUT/trace.txt
grep -E "===|TRACE cta   0|PROC" $OUT/trace.txt
