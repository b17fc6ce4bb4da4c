#!/usr/bin/env bash
# Same-call A/B timing of library builds (bench/ab/README.md).
#
#   bench/ab/ab.sh snapshot DIR REV PATH...   copy the files at PATH... (files or folders) as of
#                                             git revision REV into DIR (kept at their
#                                             repository paths): a variant folder
#   bench/ab/ab.sh run OPS VARIANT...         OPS: all, or a comma-separated list of index,
#                                             index-shapes, attention, attention-layer, step,
#                                             dense-prefill, sparse-prefill, index-prefill and
#                                             decode-step (op_ab.cu).
#                                             Each VARIANT is a
#                                             folder of files overlaid on a copy of this tree,
#                                             or "tree" for the tree as it is. Builds libmsa and
#                                             op_ab for every variant in parallel, then runs the
#                                             binaries in alternation (ROUNDS, default 2) and
#                                             prints the table of bench/ab/abtab.py last.
#   bench/ab/ab.sh build BUILD_DIR OUT VARIANT...
#                                             without a GPU: op_ab per variant into OUT, from
#                                             an up-to-date CUDA build of the tree
#                                             (bench/ab/overlay_build.py)
#   bench/ab/ab.sh run-bins OPS BINARY...     runs prebuilt op_ab binaries in alternation and
#                                             prints the table (a variant is named by its
#                                             binary's name less "op_ab_")
#
# Run it from the repository root on the GPU machine; the variant folders (or binaries) travel
# with the tree (put them under an ignored folder and carry it). WORK (default /tmp/msa_ab) holds
# the copies, builds and logs; JOBS (default 16) is split between the parallel builds.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmd=${1:-}
shift || true

# Runs op_ab binaries with OPS in alternation (ROUNDS, default 2), each named by its file name
# less "op_ab_", logs to $WORK/ab.log and prints the table of bench/ab/abtab.py last.
alternate() {
  local ops=$1 work=${WORK:-/tmp/msa_ab}
  shift
  mkdir -p "$work"
  local log="$work/ab.log"
  : >"$log"
  for r in $(seq "${ROUNDS:-2}"); do
    for b in "$@"; do
      echo "== $(basename "$b" | sed 's/^op_ab_//')" | tee -a "$log"
      "$b" "$ops" | tee -a "$log"
    done
  done
  python3 bench/ab/abtab.py "$log"
}

case "$cmd" in
  snapshot)
    dir=$1 rev=$2
    shift 2
    # A folder stands for every file under it at REV.
    git ls-tree -r --name-only "$rev" -- "$@" | while read -r f; do
      mkdir -p "$dir/$(dirname "$f")"
      git show "$rev:$f" >"$dir/$f"
    done
    ;;
  run)
    ops=$1
    shift
    [ $# -ge 1 ] || { echo "ab.sh run: no variants" >&2; exit 2; }
    work=${WORK:-/tmp/msa_ab}
    jobs=${JOBS:-16}
    per=$(( jobs / $# > 0 ? jobs / $# : 1 ))
    mkdir -p "$work"
    names=()
    for v in "$@"; do
      name=$(basename "$v")
      names+=("$name")
      (
        src="$work/src_$name"
        rm -rf "$src" && mkdir -p "$src"
        cp -r CMakeLists.txt cmake include src bench "$src/"
        if [ "$v" != tree ]; then cp -r "$v"/. "$src/"; fi
        cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMSA_WITH_CUDA=ON \
          -DMSA_BUILD_TESTS=OFF -DMSA_BUILD_TOOLS=OFF >"$work/build_$name.log" 2>&1
        cmake --build "$src/build" -j "$per" --target msa >>"$work/build_$name.log" 2>&1
        nvcc -std=c++17 -arch=sm_90a -O3 -I"$src/include" "$src/bench/ab/op_ab.cu" \
          "$src/build/libmsa.a" -lpthread -o "$work/op_ab_$name" >>"$work/build_$name.log" 2>&1
      ) || { echo "build of $v failed:" >&2; tail -30 "$work/build_$name.log" >&2; exit 1; } &
    done
    wait
    bins=()
    for name in "${names[@]}"; do
      [ -x "$work/op_ab_$name" ] || { echo "no binary for $name" >&2; exit 1; }
      bins+=("$work/op_ab_$name")
    done
    alternate "$ops" "${bins[@]}"
    ;;
  build)
    python3 bench/ab/overlay_build.py "$@"
    ;;
  run-bins)
    ops=$1
    shift
    [ $# -ge 1 ] || { echo "ab.sh run-bins: no binaries" >&2; exit 2; }
    alternate "$ops" "$@"
    ;;
  *)
    sed -n '2,24p' "$0"
    exit 2
    ;;
esac
