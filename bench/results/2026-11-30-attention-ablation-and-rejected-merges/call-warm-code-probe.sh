#!/usr/bin/env bash
# Cold-start probe: index, attention and step timed after the L2 flush as usual ("flushed") and
# with MSA_AB_WARM_CODE=1 ("warmcode": an identical problem on other buffers replayed between
# the flush and each timed replay). Tree of HEAD + the op_ab warm mode; two rounds.
set -u
cd "$(dirname "$0")/../.."
tar -C .scratch -xzf .scratch/s24b/bins.tgz; B=.scratch/bin
for r in 1 2; do
  for shape in "8192 1 1" "32768 1 1" "131072 1 1" "8192 16 1" "8192 64 1" "131072 64 1"; do
    timeout -k 5 60 $B/op_ab_tree index,attention,step $shape | sed "s/^/flushed r$r /"
    MSA_AB_WARM_CODE=1 timeout -k 5 60 $B/op_ab_tree index,attention,step $shape | sed "s/^/warmcode r$r /"
  done
done > "$OUT/warm.txt" 2>&1
python3 - "$OUT/warm.txt" <<'PY'
import sys, re, collections
d = collections.defaultdict(list); h = collections.defaultdict(set)
for line in open(sys.argv[1]):
    m = re.match(r"(\w+) r(\d) (\w+?)(_warmcode)? ctx\s+(\d+) B\s+(\d+) q(\d) (\w+)\s+(\w+): median\s+([\d.]+).*hash (\w+)", line)
    if m:
        v, r, op, _, ctx, b, q, dt, lens, us, hh = m.groups()
        d[(op, ctx, b, q, dt, lens)].append((v, us)); h[(op, ctx, b, q, dt, lens)].add(hh)
vs = ["flushed", "warmcode"]
print("op ctx B q dtype lens | " + " | ".join(vs) + " | hashes")
for k, rows in d.items():
    print(" ".join(k), "|", " | ".join("/".join(us for vv, us in rows if vv == v) for v in vs), "|", len(h[k]))
PY
