#!/usr/bin/env bash
# Session 28, call 8 (diagnostic): SM clock during the attention kernel (clock64 against
# %globaltimer from entry to the warp merge, CTA 0-3), batch 1, 16 and 64 at 8K, with
# nvidia-smi clocks before and after.
set -u
cd "$(dirname "$0")/../.."
mkdir -p .scratch/x && tar -C .scratch/x -xzf .scratch/s28h/bins.tgz; B=.scratch/x/tbin
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv
for shape in "8192 1 1" "8192 16 1" "8192 64 1" "131072 1 1"; do
  echo "=== trclk attention $shape"
  $B/op_ab_trclk attention $shape 2>&1 | grep -E "CLOCK|median|TRACE cta   0"
done > $OUT/clock.txt
cat $OUT/clock.txt
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv
