#!/usr/bin/env bash
# Diagnostic: select kernel phases and SM ids, rank count (itrace2) and sorted lists (itrace3).
set -u
cd "$(dirname "$0")/../.."
for v in itrace2 itrace3; do
  for shape in "32768 1 1" "32768 16 1" "8192 16 1"; do
    echo "=== $v index $shape"
    .scratch/bin/op_ab_$v index $shape 2>&1
  done
done > $OUT/itrace23.txt
grep -E "===|waited|bar1|count w0|select end|smids|bf16 uniform" $OUT/itrace23.txt | cut -c1-150
