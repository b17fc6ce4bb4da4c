#!/usr/bin/env bash
# Probe 1 (2026-11-30 session 3): per-kernel durations of the index op (score, select) under ncu.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMSA_WITH_CUDA=ON -DMSA_BUILD_TESTS=OFF \
  -DMSA_BUILD_TOOLS=OFF >"$OUT/build.log" 2>&1 && cmake --build build-gpu -j 16 --target msa >>"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
nvcc -std=c++17 -arch=sm_90a -O3 -Iinclude bench/ab/op_ab.cu build-gpu/libmsa.a -lpthread -o /tmp/op_ab || exit 1
echo "build $(( $(date +%s) - start )) s"
/tmp/op_ab index >"$OUT/op_ab_index.log" 2>&1
grep -E "bf16 uniform" "$OUT/op_ab_index.log" | head -20
for shape in "8192 1 1" "32768 1 1" "131072 1 1" "32768 16 1" "8192 16 1" "131072 16 1"; do
  ncu --clock-control none --metrics gpu__time_duration.sum,sm__cycles_active.avg,launch__grid_size -k regex:index -c 2 /tmp/op_ab index $shape >"$OUT/ncu_dur.log" 2>&1
  echo "== $shape"; grep -E "index_s|gpu__time_duration|grid_size" "$OUT/ncu_dur.log" | sed 's/  */ /g' | cut -c1-110
done
ncu --clock-control none --set full --import-source no -k regex:index_select -c 1 -o "$OUT/ncu_sel32k" -f /tmp/op_ab index 32768 1 1 >/dev/null 2>&1
ncu -i "$OUT/ncu_sel32k.ncu-rep" --page details >"$OUT/ncu_sel32k.txt" 2>&1
ncu -i "$OUT/ncu_sel32k.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu_sel32k_sass.csv" 2>&1
grep -E "Duration|Warp Cycles Per Issued|Executed Instructions  " "$OUT/ncu_sel32k.txt" | head
echo "total $(( $(date +%s) - start )) s"
