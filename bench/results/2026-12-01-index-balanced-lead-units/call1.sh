#!/usr/bin/env bash
# Session 34, call 1: (a) index A/B: tree (HEAD dd7439e) against the balanced score grid allowing
# the select kernel's launch at its entry (early, variant-early.diff) and, timing only, without
# the select kernel on balanced grids (nosel, variant-nosel.diff: wrong top-k); (b) %globaltimer
# traces of the balanced score and select kernels (mktrace_index.py: trace; trace_early with the
# early launch as well); (c) attention A/B: tree against pf (the one-block attention kernel's warps
# 1-6 each read one parameter line at entry; ../2026-12-01-rejected-attn-prologue-variants/).
# Binaries: bench/ab/ab.sh build of each variant, carried as .scratch/s40c/bins.tgz.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s40c/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
WORK=$L/ab1 ROUNDS=2 timeout -k 10 200 bash bench/ab/ab.sh run-bins index $B/op_ab_tree $B/op_ab_early $B/op_ab_nosel >"$L/ab-index.txt" 2>&1
echo "ab index rc=$? $(el)"
for v in trace trace_early; do
  for shape in "131072 16 1" "32768 64 1" "524288 4 1" "131072 64 1" "8192 64 1"; do
    echo "== $v index bf16 $shape"; MSA_AB_DTYPE=bf16 timeout 60 $B/op_ab_$v index,step $shape 2>&1 | grep -E "TRACE|median" | grep -v "^step" | head -8
  done
done > "$L/trace.txt" 2>&1
echo "trace $(el)"
WORK=$L/ab2 ROUNDS=3 timeout -k 10 200 bash bench/ab/ab.sh run-bins attention,attention-layer,step $B/op_ab_tree $B/op_ab_pf >"$L/ab-attn.txt" 2>&1
echo "ab attn rc=$? $(el)"
cp $L/ab-index.txt $L/ab-attn.txt $L/trace.txt $OUT/
cat $L/trace.txt
python3 bench/ab/abtab.py "$L/ab-index.txt" | head -70
python3 bench/ab/abtab.py "$L/ab-attn.txt" | head -70
rm -rf "$L/ab1" "$L/ab2"
