#!/usr/bin/env bash
# Call 2 (tree = wip/index-m2 c11cead, experiment J): A/B LF (main + limits-first, 0aa0412) vs tree;
# Nsight Compute on the 128K x 64 fp8 scorer of both; CUDA tests and memcheck of the tree.
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
mkdir -p /tmp/o
ROUNDS=2 WORK=/tmp/msa_ab bash bench/ab/ab.sh run index,step .scratch/ab/LF tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
for v in LF tree; do
  timeout 90 ncu --clock-control none --set full --import-source no --kernel-name-base demangled \
    -k "regex:index_score.*unsigned char" -c 1 -o /tmp/o/ncu_$v -f /tmp/msa_ab/op_ab_$v index 131072 64 1 \
    >/tmp/o/ncu_$v.run.log 2>&1
  echo "ncu $v rc=$? $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
  ncu -i /tmp/o/ncu_$v.ncu-rep --page details >/tmp/o/ncu_$v.details.txt 2>&1
  ncu -i /tmp/o/ncu_$v.ncu-rep --page raw --csv >/tmp/o/ncu_$v.raw.csv 2>&1
done
OUT=/tmp/o/gc JOBS=16 MSA_COMMIT=${C:-wip} bash scripts/gpu_check.sh build >/tmp/o/gc_build.txt 2>&1
echo "build $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
build-gpu/tests/msa_tests_cuda >/tmp/o/cuda_tests.log 2>&1
echo "cuda tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/o/cuda_tests.log | tr '\n' ' ') $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
grep -E '^\[  FAILED' /tmp/o/cuda_tests.log | head -20 >>"$OUT/summary.txt"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 build-gpu/tests/msa_tests_cuda \
  --gtest_filter='*Balanced*:*PaddedE4m3*:*BadDecodeValues*:*IndexTopkDecodeSweep*' >/tmp/o/memcheck.log 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/o/memcheck.log) $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
rm -f /tmp/o/*.ncu-rep
tar czf "$OUT/logs.tgz" -C /tmp/o .
tail -70 "$OUT/ab.txt"
for v in LF tree; do
  echo "== ncu $v"; grep -E "Duration|DRAM Throughput|Issue Slots Busy|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|No Eligible|Issued Warp Per" /tmp/o/ncu_$v.details.txt | head -10
done
cat "$OUT/summary.txt"
