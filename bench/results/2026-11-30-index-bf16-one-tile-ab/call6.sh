#!/usr/bin/env bash
# Session 19 call 6: same-call A/B of the index op (9e4bd45 index_topk.cu vs the tree =
# bf16 keys on the one-n-tile scorer instance), then build, the CUDA index tests and memcheck on a subset.
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 WORK=/tmp/msa_ab bash bench/ab/ab.sh run index,step .scratch/ab/base9 tree >"$OUT/ab.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
OUT=$OUT/gc JOBS=16 MSA_COMMIT=${C:-wip} bash scripts/gpu_check.sh build >"$OUT/gc_build.txt" 2>&1
echo "build $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
build-gpu/tests/msa_tests_cuda >"$OUT/cuda_index_tests.log" 2>&1
echo "index tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda_index_tests.log" | tr '\n' ' ') $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
grep -E '^\[  FAILED' "$OUT/cuda_index_tests.log" | head -20 >>"$OUT/summary.txt"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 99 build-gpu/tests/msa_tests_cuda \
  --gtest_filter='*PaddedE4m3*:*ManyRagged*:*ValuesInBalanced*:*BadDecodeValues*:*IndexTopkDecodeSweep*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log") $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
tail -45 "$OUT/ab.txt"
cat "$OUT/summary.txt"
