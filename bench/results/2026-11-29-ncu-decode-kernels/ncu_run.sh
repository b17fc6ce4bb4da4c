set -x
MAX_JOBS=16 python3 -m pip install --no-build-isolation --no-deps -q ./python > $OUT/pip.log 2>&1 || tail -5 $OUT/pip.log
nvcc -std=c++17 -arch=sm_90a -O3 --expt-relaxed-constexpr -Iinclude -Isrc -lineinfo -cubin src/cuda/sparse_attention.cu -o /tmp/sa.cubin
cuobjdump -sass -fun '_ZN3msa4cuda23sparse_attention_kernelI13__nv_bfloat16Li128EEEvNS0_16SparseAttnParamsE' /tmp/sa.cubin > $OUT/sa_bf16.sass 2>&1
ncu --clock-control none -k regex:'sparse_attention_kernel|index_score' --launch-skip 0 --launch-count 12 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  --section Occupancy --section LaunchStats --section SourceCounters \
  python3 .scratch/ncu_drv.py > $OUT/ncu.txt 2>&1
echo "ncu rc $?"
grep -E "sparse_attention_kernel|index_score|Duration|DRAM Throughput|Memory Throughput|Stall|Warp Cycles Per Issued|Achieved Occupancy|Registers|Issue Slot|L1/TEX Hit|L2 Hit|Grid Size" $OUT/ncu.txt | head -150
