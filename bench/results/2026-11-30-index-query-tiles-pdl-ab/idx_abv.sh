# A/B of index top-k builds in one device call: for each variant folder .scratch/var/NAME (index
# sources to overlay on the tree), a copy of the tree is built (in parallel) and idx_ab.cu timed
# against it; the binaries then run in alternation, two rounds.
set -e
VARS="$*"
for v in $VARS; do
  ( rm -rf /tmp/t_$v && mkdir -p /tmp/t_$v && cp -r CMakeLists.txt cmake include src /tmp/t_$v/ &&
    cp .scratch/var/$v/*.cu* /tmp/t_$v/src/cuda/ && { ! test -f .scratch/var/$v/launch_policy.h || cp .scratch/var/$v/launch_policy.h /tmp/t_$v/src/core/; } &&
    cmake -S /tmp/t_$v -B /tmp/t_$v/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMSA_WITH_CUDA=ON \
      -DMSA_BUILD_TESTS=OFF -DMSA_BUILD_TOOLS=OFF > /tmp/cfg_$v.log 2>&1 &&
    cmake --build /tmp/t_$v/b -j6 --target msa > /tmp/b_$v.log 2>&1 &&
    nvcc -std=c++17 -arch=sm_90a -O3 -Iinclude .scratch/idx_ab.cu /tmp/t_$v/b/libmsa.a -lpthread -o /tmp/iab_$v ) \
    || { echo "build $v failed"; tail -30 /tmp/b_$v.log /tmp/cfg_$v.log; exit 1; } &
done
wait
for v in $VARS; do test -x /tmp/iab_$v || { echo "missing $v"; exit 1; }; done
for r in 1 2; do for v in $VARS; do echo "== $v"; /tmp/iab_$v; done; done
