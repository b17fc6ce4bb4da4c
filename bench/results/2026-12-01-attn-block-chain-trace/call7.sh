#!/usr/bin/env bash
# Session 34, call 7 (binaries: bench/ab/ab.sh build of aa74609 with mktrace4.py applied): %globaltimer trace at ten points of the one-block attention kernel and three
# of the merge kernel (mktrace4.py on aa74609), printed by the op's next uncaptured call.
set -u
cd "$(dirname "$0")/../.."
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s44c/bins.tgz; B=/tmp/x/bin
for shape in "8192 1 1" "8192 16 1" "131072 1 1"; do
  echo "== attention bf16 $shape"; MSA_AB_DTYPE=bf16 timeout 60 $B/op_ab_trace4 attention,step $shape 2>&1 | grep -E "TRACE|median" | grep -v "^step"
done
echo "== attention-layer fp8 8192 1 1"; MSA_AB_DTYPE=fp8 timeout 60 $B/op_ab_trace4 attention-layer,step 8192 1 1 2>&1 | grep -E "TRACE|median" | grep -v "^step"
echo "== step 8192 1 1 (bf16 step's trace printed by the fp8 step's first call)"; timeout 60 $B/op_ab_trace4 step 8192 1 1 2>&1 | grep -E "TRACE|median" | head -16
