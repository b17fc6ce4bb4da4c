#!/usr/bin/env bash
# Session 29, call 4: (a) Nsight Compute durations of the select kernel (caches flushed) for
# base / tour / tourloop (the tournament with rolled loops) / nocount at 32K x 1 and 8K x 16;
# (b) the index and step A/B of the four builds, 3 rounds; (c) warp-stall breakdowns (caches
# flushed) of the batch-1 8K attention, score and select kernels of base.
set -u
cd "$(dirname "$0")/../.."
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s29b/bins.tgz; B=/tmp/x/bin
start=$(date +%s)
dur() {
  python3 - "$1" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("no rows"); sys.exit()
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value")
d = collections.defaultdict(list)
for r in rows[1:]:
    d[r[ki].split("(")[0].split("<")[0]].append(float(r[vi].replace(",", "")) / 1000)
print("  ".join(f"{k}: " + "/".join(f"{x:.2f}" for x in v) for k, v in d.items()))
PY
}
for shape in "32768 1 1" "8192 16 1"; do
  for v in base tour tourloop nocount; do
    f="$OUT/dur_${v}_${shape// /_}.csv"
    timeout -k 5 60 ncu --clock-control none --cache-control all --kernel-name regex:index_select \
      --launch-count 6 --metrics gpu__time_duration.sum --print-units base --csv $B/op_ab_$v index $shape >"$f" 2>/dev/null
    echo "$shape $v rc=$? $(dur "$f")"
  done
done
echo "at $(( $(date +%s) - start )) s"
WORK=$OUT/ab ROUNDS=3 timeout -k 10 150 bash bench/ab/ab.sh run-bins index,step $B/op_ab_base $B/op_ab_tour $B/op_ab_tourloop $B/op_ab_nocount >"$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - start )) s"
stalls() {  # name op ctx batch kernel-regex
  timeout -k 5 60 ncu --clock-control none --cache-control all --kernel-name "regex:$5" \
    --launch-skip 1 --launch-count 1 --section WarpStateStats --section SchedulerStats \
    --section LaunchStats --page raw $B/op_ab_base "$2" "$3" "$4" 1 >"$OUT/stall_$1.txt" 2>&1
  python3 - "$OUT/stall_$1.txt" "$1" <<'PY'
import re, sys
txt = open(sys.argv[1]).read()
st = {m.group(1): float(m.group(2).replace(",", "")) for m in re.finditer(
    r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio\s+\S+\s+([\d.,]+)", txt)}
tot = sum(st.values()) or 1
dur = re.search(r"gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)", txt)
top = sorted(st.items(), key=lambda kv: -kv[1])[:6]
print(sys.argv[2], "dur", dur.group(2) if dur else "?", dur.group(1) if dur else "",
      " ".join(f"{k} {100*v/tot:.0f}%" for k, v in top))
PY
}
stalls attn_8k_b1 attention 8192 1 sparse_attention
stalls attn_8k_b16 attention 8192 16 sparse_attention
stalls score_8k_b1 index 8192 1 index_score
stalls score_32k_b1 index 32768 1 index_score
stalls select_32k_b1 index 32768 1 index_select
stalls step_insert_8k_b1 step 8192 1 fused
echo "at $(( $(date +%s) - start )) s"
tar czf "$OUT/logs.tgz" -C "$OUT" ab 2>/dev/null; rm -rf "$OUT/ab"
grep -vE "^\s*$" "$OUT/ab.txt" | grep -A100 "^op "
