#!/usr/bin/env bash
# Session 33, call 2: the incumbent's split-K design in Triton (tprobe.py) against msa's attention op,
# in decode_bench's harness on decode_bench's inputs.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
MAX_JOBS=16 python3 -m pip install --no-build-isolation --no-deps -q ./python > $OUT/pip.log 2>&1
echo "pip rc=$? at $(( $(date +%s) - start )) s"
timeout -k 5 300 python3 .scratch/s39/tprobe.py > $OUT/tprobe.txt 2>&1
echo "tprobe rc=$? at $(( $(date +%s) - start )) s"
cat $OUT/tprobe.txt | grep -v Warning | tail -60
