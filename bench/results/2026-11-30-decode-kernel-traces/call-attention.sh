#!/usr/bin/env bash
# Diagnostic: per-CTA globaltimer trace of the sparse attention kernel (variant .scratch/ab/trace).
set -u
cd "$(dirname "$0")/../.."
B=.scratch/bin
for shape in "8192 1 1" "8192 1 4" "8192 16 1" "8192 64 1" "131072 1 1"; do
  echo "=== attention $shape"
  $B/op_ab_trace attention $shape 2>&1
done > $OUT/trace_attn.txt
echo "=== step 8192 1 1" > $OUT/trace_step.txt
$B/op_ab_trace step 8192 1 1 >> $OUT/trace_step.txt 2>&1
# plain tree binary, same shapes, for the untraced times
for shape in "8192 1 1" "8192 16 1"; do $B/op_ab_tree attention $shape; done > $OUT/tree_attn.txt 2>&1
grep -E "median|span" $OUT/trace_attn.txt | head -40
cat $OUT/tree_attn.txt
