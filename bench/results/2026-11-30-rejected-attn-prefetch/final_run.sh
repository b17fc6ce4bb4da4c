# Final device call: gpu_check (build test sanitize python engine) on the tree, an A/B of the
# attention L2-prefetch experiment (MSA_X_ATTN_PREFETCH 0/2/3), tests with the winner, and the
# full decode benchmark with the winner. Few files come back: everything goes to $OUT/*.log.
G=/tmp/gc; mkdir -p $G
OUT=$G JOBS=16 MSA_COMMIT=${MSA_COMMIT:-final} bash scripts/gpu_check.sh build test sanitize python engine > $G/gc_stdout.txt 2>&1
sed -n '/== gpu_check summary/,$p' $G/gc_stdout.txt > $OUT/summary.log
cp $G/engine_tp4.txt $OUT/engine_tp4.log 2>/dev/null
tail -5 $G/python_tests.log > $OUT/python_tail.log 2>/dev/null
for d in 0 2 3; do
  MSA_X_ATTN_PREFETCH=$d python3 bench/decode_bench.py --out /tmp/ab$d --contexts 8K,128K --batches 1,16,64 \
    --qlens 1,4 --dtypes bf16 --ragged uniform --peers none --time-budget 60 > $G/ab$d.log 2>&1
  echo "== prefetch $d" >> $OUT/ab.log; grep -E "ctx=.*qlen" $G/ab$d.log | sed 's/^\[[^]]*\] //; s/, SDPA.*//' >> $OUT/ab.log
done
best=$(python3 - <<'PY'
import re
tot={}
for d in (0,2,3):
    v=[float(m.group(1)) for m in re.finditer(r"attn ([\d.]+)", open(f"/tmp/gc/ab{d}.log").read())]
    tot[d]=sum(v)/len(v) if v else 1e9
b=min(tot,key=tot.get)
print(b if tot[b] < 0.97*tot[0] else 0)
PY
)
echo "mean attn by prefetch: chosen $best" >> $OUT/summary.log
if [ "$best" != 0 ]; then
  MSA_X_ATTN_PREFETCH=$best build-gpu/tests/msa_tests_cuda > $G/knob_tests.log 2>&1
  echo "tests with prefetch $best: rc $? $(grep -E '^\[  (PASSED|FAILED)' $G/knob_tests.log | tr '\n' ' ')" >> $OUT/summary.log
fi
MSA_X_ATTN_PREFETCH=$best python3 bench/decode_bench.py --out /tmp/bench --time-budget 240 > $OUT/bench_full.log 2>&1
echo "full bench rc $? (prefetch $best)" >> $OUT/summary.log
cat $OUT/summary.log
