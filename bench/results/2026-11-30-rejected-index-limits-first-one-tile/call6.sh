#!/usr/bin/env bash
# Call 6 (tree = wip/index-limits-first-onetile, V2): A/B G9 (main) vs V2 (limits before the first
# tile in every one-n-tile scorer) vs V1 (only the static bf16 one-n-tile scorer); then the CUDA
# suite and memcheck on the index subset of the tree.
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
ROUNDS=2 WORK=/tmp/msa_ab bash bench/ab/ab.sh run index,step .scratch/ab/G9 tree .scratch/ab/V1 >"$OUT/ab.txt" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
tail -70 "$OUT/ab.txt" | grep -E "^op|index|step"
OUT=/tmp/o6 JOBS=16 MSA_COMMIT=${C:-wip} bash scripts/gpu_check.sh build >/tmp/o6_build.txt 2>&1
echo "build $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
build-gpu/tests/msa_tests_cuda >"$OUT/cuda_tests.log" 2>&1
echo "cuda tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda_tests.log" | tr '\n' ' ') $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 build-gpu/tests/msa_tests_cuda \
  --gtest_filter='*Balanced*:*LongStatic*:*BadDecodeValues*:*IndexTopkDecodeSweep*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log") $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
cat "$OUT/summary.txt"
