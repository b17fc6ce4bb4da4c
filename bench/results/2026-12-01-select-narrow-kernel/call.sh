#!/usr/bin/env bash
# Session 29, call 6: the narrow-table select kernel of its own (tree) against
# 0f0b652 (base): the whole CUDA suite with the tree, memcheck and racecheck on
# the index tests (racecheck on the selection tests), the select kernel's Nsight Compute duration at
# 32K x 1, 8K x 1 and 8K x 16, then the
# index and step A/B, 3 rounds. Logs in $OUT/logs.tgz.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s29e/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
timeout -k 5 120 $B/msa_tests_cuda_tree >"$L/tests_tree.log" 2>&1
echo "tests_tree (all): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') at $(( $(date +%s) - start )) s"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head
S="IndexTopk.*:Cases/IndexTopk*:Dtypes/IndexTopk*:CudaConsistency.IndexTopk*:CudaGraphs.IndexTopk*"
timeout -k 5 120 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="$S" >"$L/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$L/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/memcheck.log" | tr '\n' ' ') at $(( $(date +%s) - start )) s"
timeout -k 5 90 compute-sanitizer --tool racecheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="IndexTopk.Selection*:IndexTopk.Equal*:IndexTopk.Nan*:IndexTopk.Narrow*" >"$L/racecheck.log" 2>&1
echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' "$L/racecheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/racecheck.log" | tr '\n' ' ') at $(( $(date +%s) - start )) s"
for shape in "32768 1 1" "8192 1 1" "8192 16 1"; do
  for v in base tree; do
    f="$L/ncu_${v}_${shape// /_}.csv"
    timeout -k 5 60 ncu --clock-control none --cache-control all --kernel-name regex:index_select \
      --launch-count 6 --metrics gpu__time_duration.sum --print-units base --csv $B/op_ab_$v index $shape >"$f" 2>/dev/null
    echo "select kernel (ncu) $shape $v rc=$? $(python3 - "$f" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0] if rows else []
v = [float(r[h.index("Metric Value")].replace(",", "")) / 1000 for r in rows[1:]] if rows else []
print("/".join(f"{x:.2f}" for x in v), "us")
PY
)"
  done
done
WORK=$L/ab ROUNDS=3 timeout -k 10 120 bash bench/ab/ab.sh run-bins index,step $B/op_ab_base $B/op_ab_tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - start )) s"
tar czf "$OUT/logs.tgz" -C "$OUT" logs 2>/dev/null; rm -rf "$L"
grep -vE "^\s*$" "$OUT/ab.txt" | grep -A100 "^op "
