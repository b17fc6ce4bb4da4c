#!/usr/bin/env bash
# Ablation of the sparse attention op (HEAD e5dd341 = tree): launch only (empty), prologue only,
# no main loop, no merges; attention op at 8K x 1/16/64 and 128K x 1, qlen 1, two rounds.
set -u
cd "$(dirname "$0")/../.."
tar -C .scratch -xzf .scratch/s24b/bins.tgz; B=.scratch/bin
for r in 1 2; do
  for shape in "8192 1 1" "8192 16 1" "8192 64 1" "131072 1 1" ; do
    for v in tree params topk qseq prologue prefixprologue prefix; do
      timeout -k 5 30 $B/op_ab_$v attention $shape | sed "s/^/$v r$r /"
    done
  done
done > "$OUT/abl.txt" 2>&1
python3 - "$OUT/abl.txt" <<'PY'
import sys, re, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"(\w+) r(\d) attention ctx\s+(\d+) B\s+(\d+) q(\d) (\w+)\s+(\w+): median\s+([\d.]+)", line)
    if m:
        v, r, ctx, b, q, dt, lens, us = m.groups()
        d[(ctx, b, q, dt)].append((v, us))
vs = ["tree", "params", "topk", "qseq", "prologue", "prefixprologue", "prefix"]
print("ctx B q dtype | " + " | ".join(vs))
for k, rows in d.items():
    cells = []
    for v in vs:
        cells.append("/".join(us for vv, us in rows if vv == v))
    print(" ".join(k), "|", " | ".join(cells))
PY
