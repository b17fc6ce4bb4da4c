# A/B of sparse attention builds in one device call: libmsa from the working tree ("new") and
# with the sources in .scratch/old swapped in ("old"), each timed by attn_ab.cu, in alternation.
set -e
build() {  # name
  cmake -S . -B b_$1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DMSA_WITH_CUDA=ON -DMSA_BUILD_TESTS=OFF \
    -DMSA_BUILD_TOOLS=OFF > /tmp/cfg_$1.log 2>&1 || { tail -20 /tmp/cfg_$1.log; exit 1; }
  cmake --build b_$1 -j16 --target msa > /tmp/b_$1.log 2>&1 || { tail -30 /tmp/b_$1.log; exit 1; }
  nvcc -std=c++17 -arch=sm_90a -O3 -Iinclude .scratch/attn_ab.cu b_$1/libmsa.a -lpthread -o /tmp/ab_$1
}
build new
mkdir -p /tmp/new && cp src/cuda/sparse_attention_kernels.cuh src/cuda/sparse_attention.cu /tmp/new/ && cp src/core/launch_policy.h /tmp/new/
cp .scratch/old/sparse_attention_kernels.cuh .scratch/old/sparse_attention.cu src/cuda/ && cp .scratch/old/launch_policy.h src/core/
build old
cp /tmp/new/sparse_attention_kernels.cuh /tmp/new/sparse_attention.cu src/cuda/ && cp /tmp/new/launch_policy.h src/core/
for r in 1 2; do for v in old new; do echo "== $v"; /tmp/ab_$v; done; done
