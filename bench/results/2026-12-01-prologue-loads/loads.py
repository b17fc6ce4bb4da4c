"""Executed loads/branches/barriers and sampled stall points of an ncu source CSV, in address order."""
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
lo, hi = int(sys.argv[2], 16), int(sys.argv[3], 16)
thr = int(sys.argv[4]) if len(sys.argv) > 4 else 3
h = rows[1]; ins = [r for r in rows[2:] if len(r) == len(h)]
ia, isrc, iss, iex = h.index("Address"), h.index("Source"), h.index("Warp Stall Sampling (All Samples)"), h.index("Instructions Executed")
stall_cols = [i for i, n in enumerate(h) if n.startswith("stall_") and "Not Issued" not in n]
base = int(ins[0][ia], 16)
for r in ins:
    off = int(r[ia], 16) - base
    if off < lo or off > hi or int(r[iex]) == 0: continue
    s = r[isrc].strip()
    key = any(k in s for k in ("LDG", "LD.", "LDS", "BAR", "MEMBAR", "SHFL", "ATOM", "RED", "STG", "ST.", "EXIT", "ERRBAR", "LDGSTS", "UCGA"))
    if key or int(r[iss]) >= thr:
        st = sorted(((h[i][6:], int(r[i])) for i in stall_cols), key=lambda kv: -kv[1])[:2]
        print(f"{off:#07x} ex {r[iex]:>4} s {r[iss]:>3} {s[:70]:70s} " + " ".join(f"{k} {v}" for k, v in st if v))
