"""List c[0x0][off] accesses of one kernel's SASS in order: kind (LDC = scoreboarded, else IMC), 64-byte line."""
import re, sys
sass = open(sys.argv[1]).read()
fn = sys.argv[2]
limit = int(sys.argv[3], 16) if len(sys.argv) > 3 else 1 << 30
blocks = sass.split("Function : ")
for b in blocks[1:]:
    name = b.split("\n", 1)[0].strip()
    if fn not in name: continue
    print("==", name[:110])
    seen = {}
    for line in b.split("\n"):
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if not m: continue
        addr = int(m.group(1), 16)
        if addr > limit: break
        ins = m.group(2)
        for off in re.findall(r"c\[0x0\]\[(0x[0-9a-f]+)\]", ins):
            o = int(off, 16)
            if o < 0x200: continue
            kind = "LDC" if re.match(r"(@\S+\s+)?LDC", ins.strip()) else "IMC"
            ln = o & ~63
            first = (kind, ln) not in seen
            seen.setdefault((kind, ln), addr)
            print(f"  {addr:#07x} {kind} {o:#x} line {ln:#x}{' NEW' if first else ''}   {ins.strip()[:60]}")
    break
