#!/usr/bin/env bash
# Session 30, call 1: Nsight Compute source counters (per-SASS-instruction warp-state samples)
# of the batch-1 8K step's kernels and of the batch-16 merge kernel and 128K select, caches
# flushed, at HEAD (fd2252e). Reports and per-instruction CSVs in $OUT/prof.tgz.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
B=.scratch/s30a/bin/op_ab_tree
P=$OUT/prof; mkdir -p $P
ncu --version | tail -1
prof() {  # name op ctx batch kernel-regex
  timeout -k 5 90 ncu --clock-control none --cache-control all --kernel-name "regex:$5" \
    --launch-skip 1 --launch-count 1 --section SourceCounters --section WarpStateStats \
    --section LaunchStats --warp-sampling-interval 0 -f -o "$P/$1" $B "$2" "$3" "$4" 1 >"$P/$1.log" 2>&1
  local rc=$?
  timeout -k 5 60 ncu --import "$P/$1.ncu-rep" --page source --print-source sass --csv >"$P/$1_src.csv" 2>"$P/$1_src.err"
  local rc2=$?
  timeout -k 5 60 ncu --import "$P/$1.ncu-rep" --page raw --csv >"$P/$1_raw.csv" 2>/dev/null
  echo "$1 rc=$rc src_rc=$rc2 lines=$(wc -l <"$P/$1_src.csv") dur=$(grep -o '"gpu__time_duration.sum","[^"]*","[^"]*"' "$P/$1_raw.csv" | head -1) at $(( $(date +%s) - start )) s"
}
prof attn_8k_b1 step 8192 1 sparse_attention_kernel
head -c 600 "$P/attn_8k_b1_src.csv"; echo; head -c 300 "$P/attn_8k_b1_src.err"
prof insert_8k_b1 step 8192 1 fused_qknorm
prof score_8k_b1 step 8192 1 index_score
prof select_8k_b1 step 8192 1 index_select
prof select_128k_b1 step 131072 1 index_select
prof score_128k_b1 step 131072 1 index_score
prof merge_8k_b16 step 8192 16 sparse_attention_merge
prof attn_8k_b16 step 8192 16 sparse_attention_kernel
(cd "$OUT" && tar czf prof.tgz prof/*.csv prof/*.log prof/*.err) && rm -rf "$P"
ls -la $OUT
echo "done at $(( $(date +%s) - start )) s"
