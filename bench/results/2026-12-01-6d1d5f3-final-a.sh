#!/usr/bin/env bash
# Session 34, final call A (run from .scratch/s46/, two levels below the root): gpu_check at C (build, CUDA and CPU tests, sanitizers, machine code),
# logs packed. Call B (final-b.sh) follows on the same warm machine, reusing build-gpu.
set -u
cd "$(dirname "$0")/../.."
C=${C:?commit}
t0=$(date +%s)
OUT=$OUT/gc JOBS=16 MSA_COMMIT=$C bash scripts/gpu_check.sh build test sanitize sass pack > "$OUT/gc_summary.txt" 2>&1
echo "gpu_check $(( $(date +%s) - t0 )) s" >> "$OUT/gc_summary.txt"
tail -12 "$OUT/gc_summary.txt"
