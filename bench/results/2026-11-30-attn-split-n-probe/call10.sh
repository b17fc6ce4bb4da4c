#!/usr/bin/env bash
# Call 10: split-N attention (branch wip/attn-splitn = tree): CUDA attention/graph tests, then a
# same-call A/B of attention and step against main's attention sources (attnmain).
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
gt=(); [ -f /usr/include/gtest/gtest.h ] || gt=(-DMSA_GTEST_SOURCE_DIR="$PWD/.gtest")
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMSA_WITH_CUDA=ON -DMSA_BUILD_TOOLS=OFF "${gt[@]}" >"$OUT/build.log" 2>&1 &&
 cmake --build build-gpu -j 8 --target msa_tests_cuda >>"$OUT/build.log" 2>&1) &
ROUNDS=1 JOBS=8 bench/ab/ab.sh run attention,step .scratch/ab/attnmain tree > "$OUT/ab.txt" 2>&1 &
wait
echo "built+ab $(( $(date +%s) - t0 )) s"
./build-gpu/tests/msa_tests_cuda --gtest_filter='*SparseAttention*:*Attention*:*Graph*:*Decode*' > "$OUT/tests.log" 2>&1
echo "tests rc=$? $(( $(date +%s) - t0 )) s"
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" "$OUT/tests.log" | head -20
tail -3 "$OUT/build.log"
grep -E "^op |^attention|^step" "$OUT/ab.txt" | tail -45
