#!/usr/bin/env bash
# Why the f16 e4m3 path is slower at batch 16-64: occupancy experiments (env switches of the
# op_ab_x build, the f16 path plus MSA_X_* hooks) against d8119f0 (base), attention-layer only.
set -u
cd "$(dirname "$0")/../.."
tar -C .scratch/s25b -xzf .scratch/s25b/bins.tgz; B=.scratch/s25b/bin
log=$OUT/ab2.log; : >"$log"
for r in 1 2; do
  for v in base f16 carve44 pad45k sms15 sms15carve44; do
    echo "== $v" >>"$log"
    case $v in
      base) timeout -k 5 60 $B/op_ab_base attention-layer ;;
      f16) timeout -k 5 60 $B/op_ab_x attention-layer ;;
      carve44) MSA_X_CARVE=44 timeout -k 5 60 $B/op_ab_x attention-layer ;;
      pad45k) MSA_X_PAD=45000 timeout -k 5 60 $B/op_ab_x attention-layer ;;
      sms15) MSA_X_SMS15=1 timeout -k 5 60 $B/op_ab_x attention-layer ;;
      sms15carve44) MSA_X_SMS15=1 MSA_X_CARVE=44 timeout -k 5 60 $B/op_ab_x attention-layer ;;
    esac >>"$log" 2>&1
  done
done
python3 bench/ab/abtab.py "$log" > "$OUT/ab2.txt"
for f in IhLi128ELb0ELb0EE IhLi128ELb0ELb1EE; do
  cuobjdump -sass -fun "_ZN3msa4cuda23sparse_attention_kernel${f}EvNS0_16SparseAttnParamsE" $B/op_ab_x > "$OUT/sass_$f.txt" 2>&1
  echo "$f $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' "$OUT/sass_$f.txt") instr, HMMA $(grep -c HMMA "$OUT/sass_$f.txt"), F2FP $(grep -c F2FP "$OUT/sass_$f.txt")"
done
cat "$OUT/ab2.txt"
