#!/usr/bin/env bash
# Session 30, call 3: attention merges without sunk loads (branch-free combine in both merges,
# merge kernel LSEs in registers, no shared memory or barrier) = merge; plus the block-table row
# preloaded with the first loads for tables of at most 256 columns = tree; base = cdc9ea6.
# Whole CUDA suite (tree), memcheck and racecheck on the attention tests, ncu durations of the
# attention kernels, attention/step A/B (3 rounds). Logs in $OUT/logs.tgz.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s30c/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
timeout -k 5 150 $B/msa_tests_cuda_tree >"$L/tests_tree.log" 2>&1
echo "tests_tree (all): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') $(el)"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head
S="SparseAttention.*:SparseAttention/SparseAttentionDecodeCases.*:CudaGraphs.*:CudaConsistency.*"
timeout -k 5 150 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="$S" >"$L/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$L/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/memcheck.log" | tr '\n' ' ') $(el)"
timeout -k 5 150 compute-sanitizer --tool racecheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="SparseAttention.*:SparseAttention/SparseAttentionDecodeCases.*" >"$L/racecheck.log" 2>&1
echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' "$L/racecheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/racecheck.log" | tr '\n' ' ') $(el)"
dur() {
  python3 - "$1" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("no rows"); sys.exit()
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value")
d = collections.defaultdict(list)
for r in rows[1:]:
    d[r[ki].split("(")[0].split("<")[0].split("::")[-1].replace("void ", "")].append(float(r[vi].replace(",", "")) / 1000)
print("  ".join(f"{k}: " + "/".join(f"{x:.2f}" for x in v) for k, v in d.items()))
PY
}
for shape in "8192 1 1" "32768 1 1" "8192 16 1" "8192 64 1" "8192 4 4"; do
  for v in base merge tree; do
    f="$L/dur_${v}_${shape// /_}.csv"
    timeout -k 5 60 ncu --clock-control none --cache-control all --kernel-name "regex:sparse_attention" \
      --launch-skip 2 --launch-count 6 --metrics gpu__time_duration.sum --print-units base --csv $B/op_ab_$v step $shape >"$f" 2>/dev/null
    echo "$shape $v rc=$? $(dur "$f")"
  done
done
echo "ncu $(el)"
WORK=$L/ab ROUNDS=3 timeout -k 10 200 bash bench/ab/ab.sh run-bins attention,step $B/op_ab_base $B/op_ab_merge $B/op_ab_tree >"$L/ab.txt" 2>&1
echo "ab rc=$? $(el)"
rm -rf "$L/ab"; grep -vE "^\s*$" "$L/ab.txt" | grep -A200 "^op " | head -80; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
