#!/usr/bin/env bash
# Session 31, call 1: Nsight Compute source counters of the kernels not read that way before
# (select kernels at 32K/128K/8Kx16, scorers at 32K/128K/8Kx16/32Kx16, e4m3 attention and scorer
# at 8K x 1, the batch-16 attention and merge kernels), caches flushed, at HEAD.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
B=.scratch/s31/bin/op_ab_tree
P=$OUT/prof; mkdir -p $P
ncu --version | tail -1
prof() {  # name dtype op ctx batch kernel-regex
  MSA_AB_DTYPE=$2 timeout -k 5 90 ncu --clock-control none --cache-control all --kernel-name "regex:$6" \
    --launch-skip 1 --launch-count 1 --section SourceCounters --section WarpStateStats \
    --section LaunchStats --warp-sampling-interval 0 -f -o "$P/$1" $B "$3" "$4" "$5" 1 >"$P/$1.log" 2>&1
  local rc=$?
  timeout -k 5 60 ncu --import "$P/$1.ncu-rep" --page source --print-source sass --csv >"$P/$1_src.csv" 2>"$P/$1_src.err"
  timeout -k 5 60 ncu --import "$P/$1.ncu-rep" --page raw --csv >"$P/$1_raw.csv" 2>/dev/null
  python3 .scratch/s31/src_prof.py "$P/$1_src.csv" 14 >>"$OUT/summary.txt" 2>&1
  echo "$1 rc=$rc dur=$(grep -o '"gpu__time_duration.sum","[^"]*","[^"]*"' "$P/$1_raw.csv" | head -1) regs=$(grep -o '"launch__registers_per_thread","[^"]*","[^"]*"' "$P/$1_raw.csv" | head -1) at $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
  rm -f "$P/$1.ncu-rep"
}
prof select_32k_b1 bf16 step 32768 1 index_select
prof score_32k_b1 bf16 step 32768 1 index_score
prof select_128k_b1 bf16 step 131072 1 index_select
prof score_128k_b1 bf16 step 131072 1 index_score
prof attn_8k_b1_fp8 fp8 step 8192 1 sparse_attention_kernel
prof score_8k_b1_fp8 fp8 step 8192 1 index_score
prof select_8k_b16 bf16 step 8192 16 index_select
prof score_8k_b16 bf16 step 8192 16 index_score
prof attn_8k_b16 bf16 step 8192 16 sparse_attention_kernel
prof merge_8k_b16 bf16 step 8192 16 sparse_attention_merge
prof score_32k_b16 bf16 step 32768 16 index_score
prof attn_8k_b1 bf16 step 8192 1 sparse_attention_kernel
(cd "$OUT" && tar czf prof.tgz prof/*_src.csv prof/*.log) && rm -rf "$P"
ls -la $OUT
echo "done at $(( $(date +%s) - start )) s"
