#!/usr/bin/env bash
# Session 34, call 5: %globaltimer traces (thread 0 per CTA: entry, exit; select: entry, after
# griddepcontrol.wait, exit) of the static and balanced score kernels and the select kernels at
# small and speculative shapes. A case's trace is printed by the next case's first call.
# Binaries: bench/ab/ab.sh build of the tree (lead units) with mktrace_index3.py applied.
set -u
cd "$(dirname "$0")/../.."
mkdir -p /tmp/x && tar -C /tmp/x -xzf .scratch/s42c/bins.tgz; B=/tmp/x/bin
for shape in "8192 1 1" "8192 16 1" "32768 1 1" "131072 1 1" "32768 16 1" "32768 4 4"; do
  echo "== index $shape"; timeout 60 $B/op_ab_trace3 index $shape 2>&1 | grep -E "TRACE|median"
done
for shape in "8192 16 4" "8192 16 1" "8192 1 1"; do
  echo "== step $shape"; timeout 60 $B/op_ab_trace3 step $shape 2>&1 | grep -E "TRACE|median"
done
