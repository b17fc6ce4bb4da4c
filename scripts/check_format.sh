#!/usr/bin/env bash
# Fails when any C++/CUDA source differs from the repository's .clang-format style.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh' '*.cpp')
if [ "${#files[@]}" -eq 0 ]; then exit 0; fi
clang-format --dry-run --Werror "${files[@]}"
echo "format: ${#files[@]} files clean"
