#!/usr/bin/env bash
# Diagnostic: per-CTA globaltimer summary of the index op's kernels (variant .scratch/ab/itrace).
# Each ITRACE block is printed at the next call, so it belongs to the case line above it.
set -u
cd "$(dirname "$0")/../.."
B=.scratch/bin
for shape in "8192 1 1" "32768 1 1" "131072 1 1" "8192 16 1" "32768 16 1" "131072 16 1" "8192 64 1" "32768 64 1" "8192 1 1"; do
  echo "=== index $shape"
  $B/op_ab_itrace index $shape 2>&1
done > $OUT/itrace.txt
cat $OUT/itrace.txt | cut -c1-130
