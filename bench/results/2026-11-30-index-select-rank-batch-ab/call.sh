#!/usr/bin/env bash
# Select rank counts reading 16 keys per batch (count_above): rank2, against head = b364af9.
# Binaries built on the workstation.
set -u
cd "$(dirname "$0")/../.."
B=.scratch/bin
for r in 1 2 3; do
  for v in head rank2; do
    echo "== $v round $r"
    "$B/op_ab_$v" index,step
  done
done >"$OUT/ab.txt" 2>&1
echo "ab rc=$?"
python3 - "$OUT/ab.txt" <<'PY'
import re, sys, collections
d = collections.defaultdict(dict)
v = None
for line in open(sys.argv[1]):
    m = re.match(r"== (\S+) round (\d)", line)
    if m: v = (m.group(1), m.group(2)); continue
    m = re.match(r"(\S+) ctx +(\d+) B +(\d+) q(\d) (\S+) +(\S+): median +([\d.]+) us .* hash (\S+)", line)
    if m: d[m.group(1, 2, 3, 4, 5, 6)][v] = (float(m.group(7)), m.group(8))
print(f"{'case':36s} {'head r1/r2/r3':>20s} {'rank2 r1/r2/r3':>20s} same-hash")
for k, r in d.items():
    cols = ["/".join(f"{r.get((x, str(i)), (0, ''))[0]:.1f}" for i in (1, 2, 3)) for x in ("head", "rank2")]
    hs = {h for (_, h) in r.values()}
    print(f"{' '.join(k):36s} {cols[0]:>20s} {cols[1]:>20s} {len(hs) == 1}")
PY
