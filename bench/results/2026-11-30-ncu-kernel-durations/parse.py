import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    print("no rows"); sys.exit()
hdr = rows[0]
ki, mi, vi, ii = (hdr.index(x) for x in ("Kernel Name", "Metric Name", "Metric Value", "ID"))
d = {}
for r in rows[1:]:
    d.setdefault((int(r[ii]), r[ki][:60]), {})[r[mi]] = r[vi].replace(",", "")
for (i, k), m in sorted(d.items()):
    t = float(m.get("gpu__time_duration.sum", "nan")) / 1000
    print(f"{i:3d} {k:60s} {t:8.2f} us  dram {m.get('dram__throughput.avg.pct_of_peak_sustained_elapsed', '?')}%")
