#!/usr/bin/env bash
# Call 1 (tree = wip/index-bf16-balanced b3edc41): A/B main vs tree vs H (tree + limits-first in
# the balanced grid), Nsight Compute on the 128K x 64 index scorers (fp8, bf16), CUDA tests, memcheck.
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 WORK=/tmp/msa_ab bash bench/ab/ab.sh run index,step .scratch/ab/mainbal tree .scratch/ab/H >"$OUT/ab.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
for dt in "unsigned char" "__nv_bfloat16"; do
  tag=$( [ "$dt" = "unsigned char" ] && echo fp8 || echo bf16 )
  timeout 90 ncu --clock-control none --set full --import-source no --kernel-name-base demangled \
    -k "regex:index_score.*$dt" -c 1 -o "$OUT/ncu_$tag" -f /tmp/msa_ab/op_ab_tree index 131072 64 1 \
    >"$OUT/ncu_$tag.run.log" 2>&1
  echo "ncu $tag rc=$? $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
  ncu -i "$OUT/ncu_$tag.ncu-rep" --page details >"$OUT/ncu_$tag.details.txt" 2>&1
  ncu -i "$OUT/ncu_$tag.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu_$tag.sass.csv" 2>&1
done
OUT=$OUT/gc JOBS=16 MSA_COMMIT=${C:-wip} bash scripts/gpu_check.sh build >"$OUT/gc_build.txt" 2>&1
echo "build $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
build-gpu/tests/msa_tests_cuda >"$OUT/cuda_tests.log" 2>&1
echo "cuda tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda_tests.log" | tr '\n' ' ') $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
grep -E '^\[  FAILED' "$OUT/cuda_tests.log" | head -20 >>"$OUT/summary.txt"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 build-gpu/tests/msa_tests_cuda \
  --gtest_filter='*Balanced*:*PaddedE4m3*:*BadDecodeValues*:*IndexTopkDecodeSweep*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log") $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
tail -80 "$OUT/ab.txt"
for tag in fp8 bf16; do
  echo "== ncu $tag"; grep -E "^  [a-z_]+index_score|Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|No Eligible|Issued Warp Per" "$OUT/ncu_$tag.details.txt" | head -14
done
cat "$OUT/summary.txt"
