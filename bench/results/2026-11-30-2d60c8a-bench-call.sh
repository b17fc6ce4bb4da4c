#!/usr/bin/env bash
# Device call: install the PyTorch ops, run the decode benchmark at commit C, then profile the
# e4m3 balanced index scorer (128K x 64 fp8) with Nsight Compute from a prebuilt op_ab.
set -u
cd "$(dirname "$0")/../.."
C=${C:?commit}
t0=$(date +%s)
MAX_JOBS=16 python3 -m pip install --no-build-isolation --no-deps -q ./python >"$OUT/pip.log" 2>&1
echo "pip rc=$? $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
mkdir -p "$OUT/bench"
MSA_GIT_COMMIT=$C python3 bench/decode_bench.py --out "$OUT/bench" --time-budget 200 >"$OUT/bench_stdout.txt" 2>&1
echo "bench rc=$? $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
if [ -x .scratch/bin/op_ab_head ]; then
  timeout 150 ncu --clock-control none --set full --import-source no -k regex:index_score_mma_balanced \
    -c 1 -o "$OUT/ncu_e4m3" .scratch/bin/op_ab_head index 131072 64 1 >"$OUT/ncu.log" 2>&1
  echo "ncu rc=$? $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
  ncu --import "$OUT/ncu_e4m3.ncu-rep" --page details >"$OUT/ncu_details.txt" 2>&1
  ncu --import "$OUT/ncu_e4m3.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu_sass.csv" 2>&1
fi
tar czf "$OUT/bench.tgz" -C "$OUT" bench bench_stdout.txt pip.log && rm -rf "$OUT/bench"
tail -3 "$OUT/bench_stdout.txt"
cat "$OUT/summary.txt"
