#!/usr/bin/env bash
# Per-kernel durations (Nsight Compute, serialized launches, caches flushed by ncu) of the
# decode ops at a few shapes: which kernel of each op costs what.
set -u
cd "$(dirname "$0")/../.."
B=.scratch/bin/op_ab
n=0
for spec in "index 8192 64 1" "attention 8192 64 1" "index 8192 16 1" "attention 8192 16 1" \
            "step 8192 1 1" "index 131072 64 1" "attention 131072 64 1"; do
  n=$((n + 1))
  set -- $spec
  echo "== $spec"
  ncu --clock-control none --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    --kernel-name-base function -k "regex:index|sparse|fused|select|merge" -c 10 --csv \
    "$B" "$@" >"$OUT/raw_$n.csv" 2>"$OUT/err_$n.txt"
  echo "rc=$?"; tail -2 "$OUT/err_$n.txt"
  python3 .scratch/s21/parse.py "$OUT/raw_$n.csv"
done
cd "$OUT" && tar czf raw.tgz raw_*.csv err_*.txt && rm -f raw_*.csv err_*.txt
