#!/usr/bin/env bash
# Session 34, call 8: the ten-point trace of call 7 with MSA_AB_WARM_CODE=1 (each timed replay
# follows the flush and a replay of an identical problem on other buffers: warm code and
# constants, cold data).
set -u
cd "$(dirname "$0")/../.."
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s44c/bins.tgz; B=/tmp/x/bin
for shape in "8192 1 1" "8192 16 1"; do
  echo "== warm code: attention bf16 $shape"; MSA_AB_WARM_CODE=1 MSA_AB_DTYPE=bf16 timeout 60 $B/op_ab_trace4 attention,step $shape 2>&1 | grep -E "TRACE|median" | grep -v "^step"
  echo "== cold: attention bf16 $shape"; MSA_AB_DTYPE=bf16 timeout 60 $B/op_ab_trace4 attention,step $shape 2>&1 | grep -E "TRACE|median" | grep -v "^step"
done
