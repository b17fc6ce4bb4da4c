# A/B of index top-k builds in one device call: for each variant folder .scratch/avar/NAME (index
# sources to overlay on the tree), a copy of the tree is built (in parallel) and attn_ab.cu timed
# against it; the binaries then run in alternation, two rounds.
set -e
VARS="$*"
for v in $VARS; do
  ( rm -rf /tmp/ta_$v && mkdir -p /tmp/ta_$v && cp -r CMakeLists.txt cmake include src /tmp/ta_$v/ &&
    cp .scratch/avar/$v/*.cu* /tmp/ta_$v/src/cuda/ && { ! test -f .scratch/avar/$v/launch_policy.h || cp .scratch/avar/$v/launch_policy.h /tmp/ta_$v/src/core/; } &&
    cmake -S /tmp/ta_$v -B /tmp/ta_$v/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMSA_WITH_CUDA=ON \
      -DMSA_BUILD_TESTS=OFF -DMSA_BUILD_TOOLS=OFF > /tmp/cfga_$v.log 2>&1 &&
    cmake --build /tmp/ta_$v/b -j6 --target msa > /tmp/ba_$v.log 2>&1 &&
    nvcc -std=c++17 -arch=sm_90a -O3 -Iinclude .scratch/attn_ab.cu /tmp/ta_$v/b/libmsa.a -lpthread -o /tmp/aab_$v ) \
    || { echo "build $v failed"; tail -30 /tmp/ba_$v.log /tmp/cfga_$v.log; exit 1; } &
done
wait
for v in $VARS; do test -x /tmp/aab_$v || { echo "missing $v"; exit 1; }; done
for r in 1 2; do for v in $VARS; do echo "== $v"; /tmp/aab_$v; done; done
