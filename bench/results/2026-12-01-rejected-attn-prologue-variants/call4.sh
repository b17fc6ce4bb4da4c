#!/usr/bin/env bash
# Session 34, call 4: attention A/B of the block-table row cache (BtRow): abase2 (HEAD's attention
# sources in the tree) against tree (columns up to 1024 cached) and bt256 (up to 256).
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s41e/bins.tgz; B=/tmp/x/bin2
L=$OUT/logs; mkdir -p $L
WORK=$L/ab ROUNDS=3 timeout -k 10 300 bash bench/ab/ab.sh run-bins attention,attention-layer,step $B/op_ab_abase2 $B/op_ab_tree $B/op_ab_bt256 >"$L/ab-attn.txt" 2>&1
echo "ab attn rc=$? at $(( $(date +%s) - start )) s"
cp $L/ab-attn.txt $OUT/
python3 bench/ab/abtab.py "$L/ab-attn.txt" 2>/dev/null | head -80
rm -rf $L
