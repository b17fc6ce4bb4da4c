#!/usr/bin/env bash
# ncu on the tree's op_ab (built by ab.sh into /tmp/msa_ab): attention kernel at 8K x 1 and 8K x 16.
B=/tmp/msa_ab/op_ab_tree
run() {
  local tag=$1 count=$2
  shift 2
  ncu --clock-control none --set full --import-source no -k regex:sparse_attention -c "$count" \
    -o "$OUT/ncu_$tag" -f "$B" attention "$@" >"$OUT/ncu_$tag.run.log" 2>&1
  echo "ncu $tag rc=$?"
  ncu -i "$OUT/ncu_$tag.ncu-rep" --page details >"$OUT/ncu_$tag.details.txt" 2>&1
  ncu -i "$OUT/ncu_$tag.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu_$tag.sass.csv" 2>&1
  grep -E "Duration|Registers Per|Achieved Occ|Warp Cycles Per Issued|Block Limit Reg" "$OUT/ncu_$tag.details.txt" | head -20
}
run b1 1 8192 1 1
run b16 2 8192 16 1
run b16q4 2 8192 16 4
