#!/usr/bin/env bash
# Timing only: the in-cluster merge's cluster.sync (release/acquire: MEMBAR.ALL.GPU) against a
# relaxed arrive (results not guaranteed; hashes show whether they moved). Three rounds.
set -u
cd "$(dirname "$0")/../.."
tar -C .scratch -xzf .scratch/s24b/bins.tgz; B=.scratch/bin
for r in 1 2 3; do
  for shape in "8192 1 1" "8192 4 1" "131072 1 1" "8192 1 4"; do
    for v in tree relaxed; do
      timeout -k 5 30 $B/op_ab_$v attention,step $shape | sed "s/^/$v r$r /"
    done
  done
done > "$OUT/abl.txt" 2>&1
python3 - "$OUT/abl.txt" <<'PY'
import sys, re, collections
d = collections.defaultdict(list); h = collections.defaultdict(set)
for line in open(sys.argv[1]):
    m = re.match(r"(\w+) r(\d) (\w+) ctx\s+(\d+) B\s+(\d+) q(\d) (\w+)\s+(\w+): median\s+([\d.]+).*hash (\w+)", line)
    if m:
        v, r, op, ctx, b, q, dt, lens, us, hh = m.groups()
        d[(op, ctx, b, q, dt, lens)].append((v, us)); h[(op, ctx, b, q, dt, lens)].add(hh)
vs = ["tree", "relaxed"]
print("op ctx B q dtype lens | " + " | ".join(vs) + " | hashes")
for k, rows in d.items():
    print(" ".join(k), "|", " | ".join("/".join(us for vv, us in rows if vv == v) for v in vs), "|", len(h[k]))
PY
