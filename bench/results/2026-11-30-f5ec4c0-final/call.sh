#!/usr/bin/env bash
# Final call: full gpu_check and the decode benchmark at commit C.
set -u
cd "$(dirname "$0")/../.."
C=${C:?commit}
t0=$(date +%s)
OUT=$OUT/gc JOBS=16 MSA_COMMIT=$C bash scripts/gpu_check.sh build test sanitize sass python engine > "$OUT/gc_summary.txt" 2>&1
echo "gpu_check $(( $(date +%s) - t0 )) s" >> "$OUT/gc_summary.txt"
MSA_GIT_COMMIT=$C python3 bench/decode_bench.py --out "$OUT/bench" --time-budget 200 > "$OUT/bench_stdout.txt" 2>&1
echo "bench rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/gc_summary.txt"
tar czf "$OUT/gc.tgz" -C "$OUT" gc && rm -rf "$OUT/gc"
tail -20 "$OUT/gc_summary.txt"
