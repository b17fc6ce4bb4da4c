#!/usr/bin/env bash
# Session 30, call 2: prologue loads in one round trip (raw loads, predicated stores) in the fused
# insert, the index score kernel's query fill and early sequence lengths (score, attention).
# tree = the working tree, base = HEAD fd2252e. The whole CUDA suite with the tree, memcheck on
# the fused/index/attention tests, Nsight Compute source counters of the tree's batch-1 kernels,
# ncu durations base/tree, then the index/attention/step A/B (3 rounds). Logs in $OUT/logs.tgz.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
B=.scratch/s30b/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
timeout -k 5 150 $B/msa_tests_cuda_tree >"$L/tests_tree.log" 2>&1
echo "tests_tree (all): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$L/tests_tree.log" | tr '\n' ' ') $(el)"
grep -E '^\[  FAILED' "$L/tests_tree.log" | head
S="FusedQkNormRope.*:FusedBadValue.*:IndexTopk.*:Dtypes/IndexTopkBadDecodeValues.*:SparseAttention.*:SparseAttention/SparseAttentionDecodeCases.*:CudaGraphs.*"
timeout -k 5 170 compute-sanitizer --tool memcheck --error-exitcode 99 $B/msa_tests_cuda_tree --gtest_filter="$S" >"$L/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$L/memcheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$L/memcheck.log" | tr '\n' ' ') $(el)"
P=$L/prof; mkdir -p $P
prof() {  # name op ctx batch kernel-regex
  timeout -k 5 60 ncu --clock-control none --cache-control all --kernel-name "regex:$5" \
    --launch-skip 1 --launch-count 1 --section SourceCounters --section WarpStateStats \
    --warp-sampling-interval 0 -f -o "$P/$1" $B/op_ab_tree "$2" "$3" "$4" 1 >/dev/null 2>&1
  timeout -k 5 60 ncu --import "$P/$1.ncu-rep" --page source --print-source sass --csv >"$P/$1_src.csv" 2>/dev/null
  rm -f "$P/$1.ncu-rep"
  python3 .scratch/s30b/src_prof.py "$P/$1_src.csv" 6 512 | head -3
}
prof insert_8k_b1 step 8192 1 fused_qknorm
prof score_8k_b1 step 8192 1 index_score
prof attn_8k_b1 step 8192 1 sparse_attention_kernel
echo "prof $(el)"
dur() {
  python3 - "$1" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("no rows"); sys.exit()
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value")
d = collections.defaultdict(list)
for r in rows[1:]:
    d[r[ki].split("(")[0].split("<")[0].split("::")[-1]].append(float(r[vi].replace(",", "")) / 1000)
print("  ".join(f"{k}: " + "/".join(f"{x:.2f}" for x in v) for k, v in d.items()))
PY
}
for shape in "8192 1 1" "32768 1 1" "8192 16 1" "131072 1 1"; do
  for v in base tree; do
    f="$L/dur_${v}_${shape// /_}.csv"
    timeout -k 5 60 ncu --clock-control none --cache-control all --kernel-name "regex:fused_qknorm|index_score|sparse_attention_kernel" \
      --launch-skip 3 --launch-count 9 --metrics gpu__time_duration.sum --print-units base --csv $B/op_ab_$v step $shape >"$f" 2>/dev/null
    echo "$shape $v rc=$? $(dur "$f")"
  done
done
echo "ncu $(el)"
WORK=$L/ab ROUNDS=3 timeout -k 10 200 bash bench/ab/ab.sh run-bins index,attention,step $B/op_ab_base $B/op_ab_tree >"$L/ab.txt" 2>&1
echo "ab rc=$? $(el)"
(cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L/ab"
grep -vE "^\s*$" "$L/ab.txt" | grep -A200 "^op " | head -120
