#!/usr/bin/env bash
# Session 33, call 1: attention launch plans at batch 1-16. prev = HEAD (dad657e); nocl = no in-cluster
# plans (B1: 32 splits of 4 subtiles + merge kernel); nocl16 = no clusters, 16 splits; s32 = clusters as
# now, 32 splits at batch 16 (512 CTAs). attention/step A/B, 3 rounds.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s39/bins.tgz; B=/tmp/x/bin
L=$OUT/logs; mkdir -p $L
el() { echo "at $(( $(date +%s) - start )) s"; }
WORK=$L/ab ROUNDS=3 timeout -k 10 420 bash bench/ab/ab.sh run-bins attention,step $B/op_ab_prev $B/op_ab_nocl $B/op_ab_nocl16 $B/op_ab_s32 >"$L/ab.txt" 2>&1
echo "ab rc=$? $(el)"
cp "$L/ab.txt" "$OUT/"
rm -rf "$L/ab"; (cd "$OUT" && tar czf logs.tgz logs) && rm -rf "$L"
