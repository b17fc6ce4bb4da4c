# A/B of index top-k builds in one device call: libmsa from the working tree ("new") and with
# the index sources and launch policy in .scratch/old swapped in ("old"), each timed by idx_ab.cu,
# in alternation.
set -e
build() {  # name
  cmake -S . -B bi_$1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DMSA_WITH_CUDA=ON -DMSA_BUILD_TESTS=OFF \
    -DMSA_BUILD_TOOLS=OFF > /tmp/cfgi_$1.log 2>&1 || { tail -20 /tmp/cfgi_$1.log; exit 1; }
  cmake --build bi_$1 -j16 --target msa > /tmp/bi_$1.log 2>&1 || { tail -30 /tmp/bi_$1.log; exit 1; }
  nvcc -std=c++17 -arch=sm_90a -O3 -Iinclude .scratch/idx_ab.cu bi_$1/libmsa.a -lpthread -o /tmp/iab_$1
}
FILES="src/cuda/index_topk_kernels.cuh src/cuda/index_topk.cu src/core/launch_policy.h"
build new
mkdir -p /tmp/newi && cp $FILES /tmp/newi/
cp .scratch/old/index_topk_kernels.cuh .scratch/old/index_topk.cu src/cuda/
cp .scratch/old/launch_policy.h src/core/
build old
cp /tmp/newi/index_topk_kernels.cuh /tmp/newi/index_topk.cu src/cuda/
cp /tmp/newi/launch_policy.h src/core/
for r in 1 2; do for v in old new; do echo "== $v"; /tmp/iab_$v; done; done
