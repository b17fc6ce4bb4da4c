#!/usr/bin/env bash
# Diagnostic: phases of the select kernel's rank path (variant .scratch/ab/itrace2).
set -u
cd "$(dirname "$0")/../.."
for shape in "8192 1 1" "32768 1 1" "8192 16 1" "32768 16 1" "32768 64 1"; do
  echo "=== index $shape"
  .scratch/bin/op_ab_itrace2 index $shape 2>&1
done > $OUT/itrace2.txt
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.applications.graphics --format=csv >> $OUT/itrace2.txt 2>&1
grep -v "score scored" $OUT/itrace2.txt | cut -c1-120
