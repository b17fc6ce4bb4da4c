#!/usr/bin/env bash
# Session 34, call 9 (recorded in bench/results/2026-12-01-attn-block-chain-trace/): Nsight Compute on the one-block attention kernel at HEAD's sources
# (op_ab_mbase of .scratch/s43c = e02856a's attention): shared-memory and warp-state sections and
# per-instruction source counters, 8K x 1 and 8K x 16 bf16 (caches flushed, clocks not locked).
set -u
cd "$(dirname "$0")/../.."
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s45c/bins.tgz; B=/tmp/x/bin/op_ab_mbase
P=$OUT/prof; mkdir -p $P
for shape in "8192 1 1" "8192 16 1"; do
  n=$(echo $shape | tr ' ' _)
  MSA_AB_DTYPE=bf16 timeout -k 5 120 ncu --clock-control none --cache-control all --kernel-name regex:sparse_attention_block --launch-skip 1 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis --section SpeedOfLight \
    --warp-sampling-interval 0 -f -o $P/blk_$n $B attention $shape >$P/blk_$n.log 2>&1
  echo "ncu $shape rc=$?"
  ncu --import $P/blk_$n.ncu-rep --page details --print-details all > $P/blk_${n}_details.txt 2>&1
  ncu --import $P/blk_$n.ncu-rep --page source --print-source sass --csv > $P/blk_${n}_src.csv 2>/dev/null
  grep -iE "Duration|Shared|Bank|Mio|Stall|Throughput|Issue Slot|Warp Cycles|L1/TEX Hit|Pipe" $P/blk_${n}_details.txt | head -60
  python3 .scratch/s45c/src_prof.py $P/blk_${n}_src.csv 30 128 | head -50
done
(cd $OUT && tar czf prof.tgz prof) && rm -rf $P
