#!/usr/bin/env bash
# Session 29, call 3: the select kernel at 32K x 1 (bf16 keys) for base / tour / nocount under
# Nsight Compute: duration with caches flushed (all) and not (none), and the warp-state stall
# breakdown with caches flushed (is the kernel waiting for instructions, memory or barriers?).
set -u
cd "$(dirname "$0")/../.."
B=.scratch/s29b/bin
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
for cc in all none; do
  for v in base tour nocount; do
    f="$OUT/dur_${cc}_${v}.csv"
    timeout -k 5 60 ncu --clock-control none --cache-control $cc --kernel-name regex:index_select \
      --launch-count 6 --metrics gpu__time_duration.sum --print-units base --csv $B/op_ab_$v index 32768 1 1 >"$f" 2>/dev/null
    echo "cache=$cc $v rc=$? $(dur "$f")"
  done
done
for v in base tour nocount; do
  timeout -k 5 60 ncu --clock-control none --cache-control all --kernel-name regex:index_select \
    --launch-skip 2 --launch-count 1 --section WarpStateStats --section SchedulerStats \
    --section LaunchStats --page raw $B/op_ab_$v index 32768 1 1 >"$OUT/stall_$v.txt" 2>&1
  echo "== stalls $v rc=$?"
  grep -E "issue_stalled_.*per_warp_active|gpu__time_duration.sum|launch__registers|warps_active.avg.per_cycle|inst_executed.sum " "$OUT/stall_$v.txt" | awk '$NF+0 > 0.005 || /time|regis/' | head -40
done
