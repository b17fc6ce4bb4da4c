#!/usr/bin/env python3
"""Warp-stall samples of ncu_sass.csv(.gz) (ncu --page source --csv --print-source sass) grouped
by how often an instruction ran: the tile loop (>= 100000 executions), once per piece (>= 1000)
and once per warp; the top stall reasons of each group and the 12 instructions with the most
samples."""
import collections
import csv
import gzip
import io
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "ncu_sass.csv.gz"
text = gzip.open(path, "rt") if path.endswith(".gz") else open(path)
rows = list(csv.reader(io.StringIO(text.read())))
hdr, data = rows[1], rows[2:]
i_s = hdr.index("Warp Stall Sampling (All Samples)")
i_e = hdr.index("Instructions Executed")
reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
groups = collections.Counter()
by_reason = collections.defaultdict(collections.Counter)
for r in data:
    e, s = int(r[i_e]), int(r[i_s])
    g = "loop" if e >= 100000 else ("per piece" if e >= 1000 else "once")
    groups[g] += s
    for h in reasons:
        v = int(r[hdr.index(h)] or 0)
        if v:
            by_reason[g][h] += v
total = sum(groups.values())
for g, s in groups.most_common():
    print(f"{g:10s} {s:6d} samples ({100.0 * s / total:4.1f}%)  top: " +
          ", ".join(f"{k[6:]} {v}" for k, v in by_reason[g].most_common(4)))
print("\ninstructions with the most samples:")
for r in sorted(data, key=lambda r: -int(r[i_s]))[:12]:
    print(f"  {r[0][-5:]} {r[1].strip()[:52]:52s} samples {r[i_s]:>5s} executed {r[i_e]}")
