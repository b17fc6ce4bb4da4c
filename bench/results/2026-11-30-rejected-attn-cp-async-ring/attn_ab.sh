# A/B of sparse attention variants in one device call: builds libmsa once per variant and times
# the same cases with each (attn_ab.cu). Variant "old" swaps in the HEAD sources from .scratch/old.
set -e
build() {  # name, extra CUDA flags
  cmake -S . -B b_$1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DMSA_WITH_CUDA=ON -DMSA_BUILD_TESTS=OFF \
    -DMSA_BUILD_TOOLS=OFF "-DCMAKE_CUDA_FLAGS=$2" -DCMAKE_CXX_FLAGS="$2" > /tmp/cfg_$1.log 2>&1 || { tail -20 /tmp/cfg_$1.log; exit 1; }
  cmake --build b_$1 -j16 --target msa > /tmp/b_$1.log 2>&1 || { tail -30 /tmp/b_$1.log; exit 1; }
  nvcc -std=c++17 -arch=sm_90a -O3 -Iinclude .scratch/attn_ab.cu b_$1/libmsa.a -lpthread -o /tmp/ab_$1
}
build s2m3 "-DMSA_X_ATTN_STAGES=2 -DMSA_X_ATTN_MINB=3"
build s3m2 "-DMSA_X_ATTN_STAGES=3 -DMSA_X_ATTN_MINB=2"
mkdir -p /tmp/new && cp src/cuda/sparse_attention_kernels.cuh src/cuda/sparse_attention.cu /tmp/new/ && cp src/core/launch_policy.h /tmp/new/
cp .scratch/old/sparse_attention_kernels.cuh .scratch/old/sparse_attention.cu src/cuda/ && cp .scratch/old/launch_policy.h src/core/
build old ""
cp /tmp/new/sparse_attention_kernels.cuh /tmp/new/sparse_attention.cu src/cuda/ && cp /tmp/new/launch_policy.h src/core/
for r in 1 2; do for v in old s2m3 s3m2; do echo "== $v"; /tmp/ab_$v; done; done
