#!/usr/bin/env bash
# Installs the Debian packages the build and tests need, when any is missing.
#   --cuda   also the CUTLASS/CuTe headers of the CUDA backend's tensor-core kernels: the pinned
#            nvidia-cutlass wheel from PyPI, unpacked into .deps/cutlass-include (where
#            cmake/cutlass.cmake looks first), when that folder is missing.
#   --stage-headers  also copy the files of the header-only packages (nlohmann/json, CLI11) into
#            .deps/prefix, where CMakeLists.txt looks too: carried to a machine that cannot
#            install packages (the GPU machine), as .gtest is for GoogleTest.
set -euo pipefail
CUTLASS_VERSION=4.2.0.0
want_cuda=0
want_stage=0
for arg in "$@"; do
  case "$arg" in
    --cuda) want_cuda=1 ;;
    --stage-headers) want_stage=1 ;;
    *) echo "install_deps.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
command -v clang-format >/dev/null || need+=(clang-format)
command -v git >/dev/null || need+=(git)
# The virtual environment of the Python tests (scripts/test.sh); Debian's python3 needs its venv
# package for that.
if command -v python3 >/dev/null && ! python3 -c "import ensurepip, venv" >/dev/null 2>&1; then
  need+=(python3-venv)
fi
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev libgmock-dev)
# JSON (configs, traces, reports) and the msa program's command line.
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
[ -f /usr/include/CLI/CLI.hpp ] || need+=(libcli11-dev)
# clang and libFuzzer for the fuzz harness (tests/fuzz), which CI runs.
command -v clang++-14 >/dev/null || need+=(clang-14)
compgen -G "/usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null ||
  need+=(libclang-rt-14-dev)
if [ "${#need[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi

if [ "$want_stage" = 1 ]; then
  prefix="$(cd "$(dirname "$0")/.." && pwd)/.deps/prefix"
  rm -rf "$prefix"
  for pkg in nlohmann-json3-dev libcli11-dev; do
    # Headers and CMake package files; the package configs find their headers relative to
    # themselves, so the copy works from any folder.
    dpkg -L "$pkg" | grep -E '^/usr/(include|share/cmake)/' | while read -r f; do
      if [ -f "$f" ]; then
        mkdir -p "$prefix/$(dirname "${f#/usr/}")"
        cp "$f" "$prefix/${f#/usr/}"
      fi
    done
  done
  echo "install_deps.sh: nlohmann/json and CLI11 in $prefix"
fi

if [ "$want_cuda" = 1 ] && [ ! -f "$(dirname "$0")/../.deps/cutlass-include/cute/tensor.hpp" ]; then
  deps="$(cd "$(dirname "$0")/.." && pwd)/.deps"
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" \
    "nvidia-cutlass==$CUTLASS_VERSION"
  python3 - "$tmp" "$deps" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, deps = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(tmp, "nvidia_cutlass-*.whl"))[0]
prefix = "cutlass_library/source/include/"
out = os.path.join(deps, "cutlass-include")
staging = out + ".partial"
shutil.rmtree(staging, ignore_errors=True)
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            dst = os.path.join(staging, name[len(prefix):])
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with z.open(name) as src, open(dst, "wb") as f:
                shutil.copyfileobj(src, f)
os.replace(staging, out)
PY
  rm -rf "$tmp"
  echo "install_deps.sh: CUTLASS $CUTLASS_VERSION headers in $deps/cutlass-include"
fi
