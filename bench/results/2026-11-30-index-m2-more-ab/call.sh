#!/usr/bin/env bash
# Prepared for the next session (tree = wip/index-m2-more): 32-key tiles for the other e4m3
# one-n-tile instances (head dim 64 with e4m3 queries; head dims 64/128 with bf16 queries).
# op_ab's index-shapes cases (main since this session) reach the changed instances. Before the call:
#   rm -rf .scratch/ab/main && bash bench/ab/ab.sh snapshot .scratch/ab/main main \
#     src/cuda/index_topk.cu src/cuda/index_topk_kernels.cuh src/core/launch_policy.h
# Call: C=<commit> bash .scratch/s20/next_m2_more.sh  (carry .scratch and .gtest)
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 WORK=/tmp/msa_ab bash bench/ab/ab.sh run index,index-shapes,step .scratch/ab/main tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
OUT=/tmp/o JOBS=16 MSA_COMMIT=${C:-wip} bash scripts/gpu_check.sh build >/tmp/o_build.txt 2>&1
build-gpu/tests/msa_tests_cuda >"$OUT/cuda_tests.log" 2>&1
echo "cuda tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda_tests.log" | tr '\n' ' ') $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 build-gpu/tests/msa_tests_cuda \
  --gtest_filter='*Balanced*:*LongStatic*:*BadDecodeValues*:*IndexTopkDecodeSweep*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log") $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
tail -75 "$OUT/ab.txt"
cat "$OUT/summary.txt"
