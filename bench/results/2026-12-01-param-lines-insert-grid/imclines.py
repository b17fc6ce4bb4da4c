"""Per kernel: 64-byte parameter lines first touched by blocking constant accesses (IMC: ULDC or c[] operands), before the
first global load (LDG) in code order, and in all; LDC lines listed apart."""
import re, sys
sass = open(sys.argv[1]).read()
pat = sys.argv[2] if len(sys.argv) > 2 else ""
for b in sass.split("Function : ")[1:]:
    name = b.split("\n", 1)[0].strip()
    if pat not in name: continue
    pre, allimc, ldc = [], [], []
    seen_ldg = False
    for line in b.split("\n"):
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if not m: continue
        s = m.group(2).strip()
        if "LDG" in s: seen_ldg = True
        for off in re.findall(r"c\[0x0\]\[(0x[0-9a-f]+)\]", s):
            o = int(off, 16)
            if o < 0x200: continue
            ln = o & ~63
            if re.match(r"(@\S+\s+)?LDC", s):
                if ln not in ldc: ldc.append(ln)
                continue
            if ln not in allimc: allimc.append(ln)
            if not seen_ldg and ln not in pre: pre.append(ln)
    short = re.sub(r"_ZN3msa4cuda(53_GLOBAL__N__\w+?_447f5c8a)?\d+", "", name)[:70]
    print(f"{short:70s} pre {len(pre)} {[hex(x) for x in pre]} all {len(allimc)}")
