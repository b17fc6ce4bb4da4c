#!/usr/bin/env python3
"""Per-kernel machine-code fingerprints of a CUDA build, to show a refactor left the SASS alone.

  bench/ab/sass_hash.py dump LIB_OR_BUILD_DIR [-o FILE]   one line per kernel: hash, resources, name
  bench/ab/sass_hash.py compare OLD NEW                   exit 0 when every kernel is identical

LIB_OR_BUILD_DIR is a libmsa.a (or any object cuobjdump reads) or a build folder holding one.
A kernel's hash covers its SASS (instructions and encodings, as `cuobjdump -sass` prints them);
the resources column is `cuobjdump -res-usage` (registers, stack, shared, local, constant bank),
which the SASS alone does not show. Kernels are named by their demangled names with the
anonymous namespace's per-file tag removed, so moving a kernel to another file keeps its name;
`compare` pairs kernels by name, then pairs the rest by hash (a renamed type or namespace in the
signature) and reports them as renamed. cuobjdump is taken from $CUOBJDUMP, else from PATH.
"""
import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict


def cuobjdump():
    exe = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not exe:
        sys.exit("sass_hash.py: cuobjdump not found (set CUOBJDUMP or put it on PATH)")
    return exe


def library(path):
    if os.path.isdir(path):
        lib = os.path.join(path, "libmsa.a")
        if not os.path.exists(lib):
            sys.exit(f"sass_hash.py: no libmsa.a in {path}")
        return lib
    return path


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return out if len(out) == len(names) else names


def kernels(lib):
    """{mangled name: (sass hash, resources)} of every function in lib."""
    sass = subprocess.run([cuobjdump(), "-sass", lib], capture_output=True, text=True,
                          check=True).stdout
    bodies, name = defaultdict(list), None
    for line in sass.splitlines():
        m = re.match(r"\s+Function : (\S+)", line)
        if m:
            name = m.group(1)
            continue
        if line.startswith("member ") or line.startswith("Fatbin ") or line.strip().startswith(
                "....."):
            name = None
            continue
        if name is not None:
            # cuobjdump pads its columns to the widest instruction of the whole dump, which other
            # kernels decide: whitespace is not part of the fingerprint.
            bodies[name].append(" ".join(line.split()))
    res = {}
    usage = subprocess.run([cuobjdump(), "-res-usage", lib], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    for i, line in enumerate(usage):
        m = re.match(r"\s*Function (\S+):$", line)
        if m and i + 1 < len(usage):
            res[m.group(1)] = " ".join(usage[i + 1].split())
    return {n: (hashlib.sha256("\n".join(b).encode()).hexdigest()[:16], res.get(n, "?"))
            for n, b in bodies.items()}


def dump(args):
    ks = kernels(library(args.lib))
    mangled = sorted(ks)
    # c++filt prints _GLOBAL__N__<per-file tag> as "(anonymous namespace)", the same in any file.
    names = [" ".join(n.split()) for n in demangle(mangled)]
    seen = defaultdict(int)
    lines = []
    for m, n in sorted(zip(mangled, names), key=lambda p: p[1]):
        seen[n] += 1
        key = n if seen[n] == 1 else f"{n} #{seen[n]}"
        h, r = ks[m]
        lines.append(f"{h}\t{r}\t{key}")
    text = "\n".join(lines) + "\n"
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
        print(f"{len(lines)} kernels -> {args.output}")
    else:
        sys.stdout.write(text)


def read(path):
    out = {}
    with open(path) as f:
        for line in f:
            h, r, n = line.rstrip("\n").split("\t", 2)
            out[n] = (h, r)
    return out


def compare(args):
    old, new = read(args.old), read(args.new)
    same, changed = [], []
    for n in sorted(set(old) & set(new)):
        (same if old[n] == new[n] else changed).append(n)
    gone = {n: old[n] for n in set(old) - set(new)}
    added = {n: new[n] for n in set(new) - set(old)}
    by_value = defaultdict(list)
    for n, v in added.items():
        by_value[v].append(n)
    renamed = []
    for n in sorted(gone):
        if by_value.get(gone[n]):
            m = by_value[gone[n]].pop(0)
            renamed.append((n, m))
            del added[m]
    for n, m in renamed:
        del gone[n]
    print(f"identical: {len(same)}  renamed, identical: {len(renamed)}  changed: {len(changed)}"
          f"  removed: {len(gone)}  added: {len(added)}")
    for n, m in renamed:
        print(f"renamed   {n}\n       -> {m}")
    for n in changed:
        print(f"changed   {n}\n          {old[n][0]} {old[n][1]}\n          {new[n][0]} {new[n][1]}")
    for n in sorted(gone):
        print(f"removed   {n}")
    for n in sorted(added):
        print(f"added     {n}")
    return 0 if not (changed or gone or added) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("lib")
    d.add_argument("-o", "--output")
    c = sub.add_parser("compare")
    c.add_argument("old")
    c.add_argument("new")
    args = p.parse_args()
    if args.cmd == "dump":
        dump(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
