#!/usr/bin/env bash
# Call 5: same-call A/B of 8-warp in-cluster attention CTAs (branch wip/attn-wide2 = tree) against
# main (head4), plus the launch's block size under ncu to show which kernel ran.
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 bench/ab/ab.sh run attention,step .scratch/ab/head4 tree > "$OUT/ab.txt" 2>&1
cp /tmp/msa_ab/ab.log "$OUT/ab.log" 2>/dev/null
for v in head4 tree; do
  for shape in "8192 1 1" "8192 4 1" "8192 16 1"; do
    ncu --metrics launch__block_size,launch__grid_size,launch__cluster_dim_z -k regex:sparse_attention_kernel -c 1 /tmp/msa_ab/op_ab_$v attention $shape 2>&1 | grep -E "launch__" | sed "s/^/$v $shape /"
  done
done
grep -E "^op |^attention|^step" "$OUT/ab.txt" | tail -60
echo "total $(( $(date +%s) - t0 )) s"
