#!/usr/bin/env bash
# index-shapes A/B of three libmsa builds made on the workstation (op_ab_main: fe1b9cb; op_ab_tree:
# the tree, 32-key static tiles at head dim 64 when the grid fits one wave of them; op_ab_t4: the
# tree with bf16 keys at head dims 192/256 back on the four-n-tile scorer), then the tree's CUDA
# index tests and memcheck on the wide-tile ones.
set -u
cd "$(dirname "$0")/../.."
B=.scratch/bin
for r in 1 2; do
  for v in main tree t4; do
    echo "== $v round $r"
    "$B/op_ab_$v" index-shapes
  done
done >"$OUT/ab.txt" 2>&1
echo "ab rc=$?"
"$B/msa_tests_cuda" --gtest_filter='IndexTopk*:LaunchPolicy*' >"$OUT/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 99 "$B/msa_tests_cuda" \
  --gtest_filter='*LongStatic*:*WideTile*:*BadInput.Values*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log")"
python3 - "$OUT/ab.txt" <<'PY'
import re, sys, collections
d = collections.defaultdict(dict)
v = None
for line in open(sys.argv[1]):
    m = re.match(r"== (\S+) round (\d)", line)
    if m: v = m.group(1) + m.group(2); continue
    m = re.match(r"(\S+) ctx +(\d+) B +(\d+) q(\d) (\S+) +(\S+): median +([\d.]+) us .* hash (\S+)", line)
    if m: d[m.group(1, 2, 3, 5, 6)][v] = (float(m.group(7)), m.group(8))
print(f"{'case':44s} {'main':>13s} {'tree':>13s} {'t4':>13s} same-hash")
for k, r in d.items():
    cols = [f"{r.get(x+'1',(0,''))[0]:6.1f}/{r.get(x+'2',(0,''))[0]:<6.1f}" for x in ("main", "tree", "t4")]
    hs = {h for (_, h) in r.values()}
    print(f"{' '.join(k):44s} {cols[0]:>13s} {cols[1]:>13s} {cols[2]:>13s} {len(hs) == 1}")
PY
