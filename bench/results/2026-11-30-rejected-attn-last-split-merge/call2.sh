#!/usr/bin/env bash
# Session 27, call 5: why the last-split merge (call 4) cost ~30 us: the same with the dependent-
# launch trigger kept (lastpdl), the counter alone with the merge kernel (count), the fence alone
# with the merge kernel (fence). Attention op A/B, 2 rounds.
set -u
cd "$(dirname "$0")/../.."
mkdir -p .scratch/x && tar -C .scratch/x -xzf .scratch/s27e/bins.tgz; B=.scratch/x/bin
WORK=$OUT/ab ROUNDS=2 timeout -k 10 300 bash bench/ab/ab.sh run-bins attention $B/op_ab_tree $B/op_ab_last $B/op_ab_lastpdl $B/op_ab_count $B/op_ab_fence >"$OUT/ab.txt" 2>&1
echo "ab rc=$?"
grep -vE "^\s*$" "$OUT/ab.txt" | grep -A100 "^op "
