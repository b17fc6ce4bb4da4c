#!/usr/bin/env python3
"""Builds op_ab for library variants without a GPU, from an up-to-date CMake build of the tree.

    overlay_build.py BUILD_DIR OUT_DIR VARIANT...

BUILD_DIR is a Ninja build of this tree with the CUDA backend (its libmsa.a up to date). A VARIANT
is a folder of files at their repository paths (bench/ab/ab.sh snapshot), or "tree". For each
variant the objects of libmsa whose sources or included headers the variant replaces are
recompiled with BUILD_DIR's own compile commands, the variant's folders searched first for
includes and its copy of a source used where it has one; with the other objects they make the
variant's libmsa, and bench/ab/op_ab.cu (the variant's copy if it has one: a snapshot that
predates API the tree's op_ab.cu uses) is linked against it into OUT_DIR/op_ab_NAME. "tree"
links the archive as it is. The binaries then run on the GPU machine (bench/ab/ab.sh run-bins),
so a device call spends no time building. Dependencies come from `ninja -t deps`, so BUILD_DIR
must have built every object once.
"""
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def sh(cmd, cwd=None):
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout


def library_objects(build):
    """(object path relative to build, compile command) of every libmsa object."""
    out = []
    for line in sh(["ninja", "-t", "commands", "msa"], cwd=build).splitlines():
        args = shlex.split(line)
        if "-c" not in args or "-o" not in args:
            continue
        out.append((args[args.index("-o") + 1], args))
    return out


def dependencies(build, obj):
    text = sh(["ninja", "-t", "deps", obj], cwd=build)
    return {os.path.realpath(l.strip()) for l in text.splitlines()[1:] if l.strip()}


def variant_files(variant):
    files = {}
    for root, _, names in os.walk(variant):
        for n in names:
            path = os.path.join(root, n)
            files[os.path.realpath(os.path.join(REPO, os.path.relpath(path, variant)))] = path
    return files


def build_variant(build, out_dir, variant, objects, deps):
    name = os.path.basename(os.path.normpath(variant))
    lib = os.path.join(out_dir, f"libmsa_{name}.a")
    if variant == "tree":
        shutil.copyfile(os.path.join(build, "libmsa.a"), lib)
    else:
        replaced = variant_files(variant)
        tmp_dir = tempfile.TemporaryDirectory(prefix=f"overlay_{name}_")
        tmp = tmp_dir.name
        # Every object of libmsa in build order, the recompiled ones from tmp (at their paths
        # relative to the build: sources in different folders share object names, e.g.
        # src/core/index_topk.cc and src/cpu/index_topk.cc).
        members, recompiled = [], 0
        for obj, args in objects:
            if not deps[obj] & replaced.keys():
                members.append(os.path.join(build, obj))
                continue
            cmd = list(args)
            src = cmd.index("-c") + 1
            cmd[src] = replaced.get(os.path.realpath(cmd[src]), cmd[src])
            first_include = next(i for i, a in enumerate(cmd) if a.startswith("-I"))
            cmd[first_include:first_include] = [f"-I{os.path.join(variant, 'include')}",
                                                f"-I{os.path.join(variant, 'src')}"]
            member = os.path.join(tmp, obj)
            os.makedirs(os.path.dirname(member), exist_ok=True)
            cmd[cmd.index("-o") + 1] = member
            for flag in ("-MD", "-MT", "-MF"):
                while flag in cmd:
                    i = cmd.index(flag)
                    del cmd[i:i + (1 if flag == "-MD" else 2)]
            print(f"  {name}: {os.path.basename(obj)}", flush=True)
            subprocess.run(cmd, cwd=build, check=True)
            members.append(member)
            recompiled += 1
        if not recompiled:
            sys.exit(f"{variant}: replaces nothing libmsa is built from")
        # A new archive, as CMake makes it (`ar qc` keeps members of the same name; `ar r` into
        # a copy of the tree's would replace the first of them).
        if os.path.exists(lib):
            os.remove(lib)
        subprocess.run(["ar", "qc", lib] + members, check=True)
        subprocess.run(["ranlib", lib], check=True)
        tmp_dir.cleanup()
    binary = os.path.join(out_dir, f"op_ab_{name}")
    include = os.path.join(variant if variant != "tree" else REPO, "include")
    # A variant may carry its own op_ab.cu, when the tree's uses API the variant lacks.
    source = os.path.join(variant, "bench/ab/op_ab.cu")
    if variant == "tree" or not os.path.exists(source):
        source = os.path.join(REPO, "bench/ab/op_ab.cu")
    subprocess.run(["nvcc", "-std=c++17", "-arch=sm_90a", "-O3", f"-I{include}",
                    f"-I{os.path.join(REPO, 'include')}", source,
                    lib, "-lpthread", "-o", binary], check=True)
    print(binary)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    build, out_dir = os.path.realpath(sys.argv[1]), sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    objects = library_objects(build)
    deps = {obj: dependencies(build, obj) for obj, _ in objects}
    for variant in sys.argv[3:]:
        # Absolute, since the variant's sources and include folders are compiled from BUILD_DIR.
        build_variant(build, out_dir, variant if variant == "tree" else os.path.realpath(variant),
                      objects, deps)


if __name__ == "__main__":
    main()
