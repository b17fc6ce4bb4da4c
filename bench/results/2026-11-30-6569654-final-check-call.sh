#!/usr/bin/env bash
# Final call 2: gpu_check's build, CUDA and CPU tests, sanitizers, machine code and engine run at C.
set -u
cd "$(dirname "$0")/../.."
C=${C:?commit}
t0=$(date +%s)
OUT=$OUT/gc JOBS=16 MSA_COMMIT=$C bash scripts/gpu_check.sh build test sanitize sass engine pack > "$OUT/gc_summary.txt" 2>&1
echo "gpu_check $(( $(date +%s) - t0 )) s" >> "$OUT/gc_summary.txt"
tail -12 "$OUT/gc_summary.txt"
