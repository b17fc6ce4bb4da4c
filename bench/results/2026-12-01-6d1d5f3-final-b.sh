#!/usr/bin/env bash
# Session 34, final call B: gpu_check's PyTorch suite and engine stages at C, then the decode
# benchmark at C.
set -u
cd "$(dirname "$0")/../.."
C=${C:?commit}
t0=$(date +%s)
OUT=$OUT/gc JOBS=16 MSA_COMMIT=$C bash scripts/gpu_check.sh build python engine pack > "$OUT/gc_summary.txt" 2>&1
echo "gpu_check $(( $(date +%s) - t0 )) s" >> "$OUT/gc_summary.txt"
mkdir -p "$OUT/bench"
MSA_GIT_COMMIT=$C python3 bench/decode_bench.py --out "$OUT/bench" --time-budget 200 > "$OUT/bench/stdout.txt" 2>&1
echo "bench rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/gc_summary.txt"
tar czf "$OUT/bench.tgz" -C "$OUT" bench && rm -rf "$OUT/bench"
tail -14 "$OUT/gc_summary.txt"
