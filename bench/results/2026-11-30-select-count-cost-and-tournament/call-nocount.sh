#!/usr/bin/env bash
# Session 28, call 10 (diagnostic): the index op with the select kernel's rank count removed
# (nocount: a wrong selection, timing only) against the tree, 2 rounds.
set -u
cd "$(dirname "$0")/../.."
mkdir -p .scratch/x && tar -C .scratch/x -xzf .scratch/s28j/bins.tgz; B=.scratch/x/bin3
WORK=$OUT/ab ROUNDS=2 timeout -k 10 300 bash bench/ab/ab.sh run-bins index $B/op_ab_tree $B/op_ab_nocount >"$OUT/ab.txt" 2>&1
echo "ab rc=$?"
rm -rf "$OUT/ab"
grep -vE "^\s*$" "$OUT/ab.txt" | grep -A100 "^op "
