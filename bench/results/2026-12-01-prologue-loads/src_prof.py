"""Summarise an ncu --page source --csv dump: samples per instruction, grouped into windows."""
import csv, sys
path = sys.argv[1]
top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
rows = list(csv.reader(open(path)))
h = rows[1]
ins = [r for r in rows[2:] if len(r) == len(h)]
ia, isrc, iss, iex = h.index("Address"), h.index("Source"), h.index("Warp Stall Sampling (All Samples)"), h.index("Instructions Executed")
stall_cols = [i for i, n in enumerate(h) if n.startswith("stall_") and "Not Issued" not in n]
tot = sum(int(r[iss]) for r in ins)
base = int(ins[0][ia], 16)
executed = sum(1 for r in ins if int(r[iex]) > 0)
print(f"{path}: {len(ins)} instructions, {executed} executed, {tot} samples")
agg = {}
for r in ins:
    for i in stall_cols:
        agg[h[i]] = agg.get(h[i], 0) + int(r[i])
print("  stalls:", " ".join(f"{k[6:]} {100*v/tot:.0f}%" for k, v in sorted(agg.items(), key=lambda kv: -kv[1])[:8]))
# cumulative by address windows of 256 instructions
win = int(sys.argv[3]) if len(sys.argv) > 3 else 256
for w0 in range(0, len(ins), win):
    seg = ins[w0:w0 + win]
    s = sum(int(r[iss]) for r in seg)
    ex = sum(1 for r in seg if int(r[iex]) > 0)
    if s == 0 and ex == 0: continue
    sa = {}
    for r in seg:
        for i in stall_cols:
            sa[h[i]] = sa.get(h[i], 0) + int(r[i])
    print(f"  [{(int(seg[0][ia],16)-base):#07x}..] exec {ex:4d}/{len(seg)} samples {100*s/tot:5.1f}%  " +
          " ".join(f"{k[6:]} {100*v/max(s,1):.0f}%" for k, v in sorted(sa.items(), key=lambda kv: -kv[1])[:4]))
print("  top instructions:")
for r in sorted(ins, key=lambda r: -int(r[iss]))[:top]:
    st = sorted(((h[i][6:], int(r[i])) for i in stall_cols), key=lambda kv: -kv[1])[:3]
    print(f"   {(int(r[ia],16)-base):#07x} {int(r[iss])*100/tot:5.1f}% ex {r[iex]:>5} {r[isrc].strip()[:60]:60s} " + " ".join(f"{k} {v}" for k, v in st if v))
