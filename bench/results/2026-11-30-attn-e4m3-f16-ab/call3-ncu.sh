#!/usr/bin/env bash
# Nsight Compute of the attention kernel at 8K x 64 x 4 rows, fp8 per-layer: base vs f16 path.
set -u
cd "$(dirname "$0")/../.."
tar -C .scratch/s25b -xzf .scratch/s25b/bins.tgz; B=.scratch/s25b/bin
for v in base x; do
  timeout -k 5 120 ncu --clock-control none --set full -k regex:sparse_attention_kernel -c 1 \
    --csv --page details $B/op_ab_$v attention-layer 8192 64 4 > "$OUT/ncu_$v.csv" 2>&1
  echo "$v rc=$?"
done
python3 - "$OUT/ncu_base.csv" "$OUT/ncu_x.csv" <<'PY'
import csv, sys
def load(p):
    rows = {}
    with open(p) as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        rows[(r.get("Section Name"), r.get("Metric Name"))] = (r.get("Metric Value"), r.get("Metric Unit"))
    return rows
a, b = load(sys.argv[1]), load(sys.argv[2])
for k in a:
    if k in b and a[k][0] != b[k][0]:
        print(f"{k[0][:28]:28s} {k[1][:44]:44s} {a[k][0]:>14s} {b[k][0]:>14s} {a[k][1]}")
PY
