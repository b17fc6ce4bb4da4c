#!/usr/bin/env bash
# Session 31, call 8: the rope frequency of a lane without a division (norm_rope), against 10308fb.
# tree = working tree, prev = 10308fb.
# Whole CUDA suite (tree), memcheck on the fused-op tests, ncu durations of the insert kernel,
# step A/B (3 rounds). Logs in $OUT/logs.tgz.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s31/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
timeout -k 5 150 $B/msa_tests_cuda_tree >"$L/tests_tree.log" 2>&1
echo "tests_tree (all): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') $(el)"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head
timeout -k 5 100 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="FusedQkNormRope*:Fused*:CudaGraphs*" >"$L/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$L/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/memcheck.log" | tr '\n' ' ') $(el)"
dur() {  # op ctx batch qlen regex
  for v in prev tree; do
    f="$L/dur_${v}_$1_$2_$3_$4.csv"
    MSA_AB_DTYPE=bf16 timeout -k 5 60 ncu --clock-control none --cache-control all --kernel-name "regex:$5" \
      --launch-skip 2 --launch-count 6 --metrics gpu__time_duration.sum --print-units base --csv $B/op_ab_$v $1 $2 $3 $4 >"$f" 2>/dev/null
    echo "$5 $1 $2x$3x$4 $v rc=$? $(python3 -c "
import csv,sys
rows=[r for r in csv.reader(open('$f')) if len(r)>10]
h=rows[0] if rows else []
print('/'.join(f\"{float(r[h.index('Metric Value')].replace(',',''))/1000:.2f}\" for r in rows[1:]))")"
  done
}
dur step 8192 1 1 fused_qknorm
dur step 8192 16 1 fused_qknorm
dur step 131072 64 1 fused_qknorm
echo "durations done $(el)"
WORK=$L/ab ROUNDS=3 timeout -k 10 200 bash bench/ab/ab.sh run-bins step $B/op_ab_prev $B/op_ab_tree >"$L/ab.txt" 2>&1
echo "ab rc=$? $(el)"
rm -rf "$L/ab"; grep -vE "^\s*$" "$L/ab.txt" | grep -A300 "^op " | head -60; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
