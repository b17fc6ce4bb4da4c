#!/usr/bin/env bash
# Session 33, call 6: %globaltimer trace of the one-block attention kernel and the merge kernel at
# f728679 (tr/mktrace3.py patches a copy; op_ab_trace). Each trace is printed by the op's next
# uncaptured call, so every run pairs the traced op with a following one.
set -u
cd "$(dirname "$0")/../.."
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s39/bins.tgz; B=/tmp/x/bin
for shape in "8192 1 1" "8192 16 1" "131072 1 1" "131072 16 1"; do
  echo "== attention bf16 $shape"; MSA_AB_DTYPE=bf16 timeout 60 $B/op_ab_trace attention,step $shape 2>&1 | grep -E "TRACE|median" | grep -v "^step"
done
echo "== attention-layer fp8 8192 1 1"; MSA_AB_DTYPE=fp8 timeout 60 $B/op_ab_trace attention-layer,step 8192 1 1 2>&1 | grep -E "TRACE|median" | grep -v "^step"
echo "== step bf16 8192 1 1 (trace of the bf16 step, printed by the fp8 step's first call)"; timeout 60 $B/op_ab_trace step 8192 1 1 2>&1 | grep -E "TRACE|median" | head -16
