#!/usr/bin/env bash
# Session 30, call 7: the attention merge kernel takes a compact parameter struct
# (AttnMergeParams, ~100 bytes) instead of SparseAttnParams. tree = working tree, base = 7b3c493.
# Whole CUDA suite (tree), memcheck on the attention tests, ncu durations of the merge kernel,
# attention A/B (3 rounds). Logs in $OUT/logs.tgz.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s30f/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
timeout -k 5 150 $B/msa_tests_cuda_tree >"$L/tests_tree.log" 2>&1
echo "tests_tree (all): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') $(el)"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head
timeout -k 5 100 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="SparseAttention.*:SparseAttention/SparseAttentionDecodeCases.*" >"$L/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$L/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/memcheck.log" | tr '\n' ' ') $(el)"
for shape in "8192 16 1" "8192 64 1" "8192 4 4"; do
  for v in base tree; do
    f="$L/dur_${v}_${shape// /_}.csv"
    timeout -k 5 60 ncu --clock-control none --cache-control all --kernel-name "regex:sparse_attention_merge" \
      --launch-skip 2 --launch-count 6 --metrics gpu__time_duration.sum --print-units base --csv $B/op_ab_$v attention $shape >"$f" 2>/dev/null
    echo "$shape $v rc=$? $(python3 -c "
import csv,sys
rows=[r for r in csv.reader(open('$f')) if len(r)>10]
h=rows[0] if rows else []
print('/'.join(f\"{float(r[h.index('Metric Value')].replace(',',''))/1000:.2f}\" for r in rows[1:]))")"
  done
done
WORK=$L/ab ROUNDS=3 timeout -k 10 120 bash bench/ab/ab.sh run-bins attention,step $B/op_ab_base $B/op_ab_tree >"$L/ab.txt" 2>&1
echo "ab rc=$? $(el)"
rm -rf "$L/ab"; grep -vE "^\s*$" "$L/ab.txt" | grep -A200 "^op " | head -70; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
