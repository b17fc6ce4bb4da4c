#!/usr/bin/env python3
"""Table of an A/B log of bench/ab/ab.sh: per case, each variant's medians (us) round by round,
and how many distinct output hashes the variants gave (1: the same bits everywhere)."""
import collections
import re
import sys

LINE = re.compile(r"^(\w+) ctx\s+(\d+) B\s+(\d+) q(\d+) (\S+)\s+(\S+): median\s+([\d.]+) us "
                  r"\(min\s+[\d.]+\) hash (\S+)")


def main(path: str) -> None:
    times: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    hashes: dict = collections.defaultdict(set)
    order: list = []
    variant = None
    with open(path) as f:
        for line in f:
            if line.startswith("== "):
                variant = line.split()[1]
                if variant not in order:
                    order.append(variant)
                continue
            m = LINE.match(line)
            if m and variant is not None:
                key = (m[1], int(m[2]), int(m[3]), int(m[4]), m[5], m[6])
                times[key][variant].append(float(m[7]))
                hashes[key].add(m[8])
    print("op        ctx     B  q dtype lens    " + " ".join(v.rjust(15) for v in order) +
          "  hashes")
    for key, per in times.items():
        op, ctx, b, q, dt, lens = key
        cells = " ".join("/".join(f"{t:.1f}" for t in per[v]).rjust(15) for v in order)
        print(f"{op:9} {ctx:6} {b:3} {q:2} {dt:5} {lens:7} {cells}  {len(hashes[key])}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: abtab.py LOG")
    main(sys.argv[1])
