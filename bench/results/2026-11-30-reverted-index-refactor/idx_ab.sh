set -e
cmake -S . -B b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMSA_WITH_CUDA=ON -DMSA_BUILD_TESTS=OFF -DMSA_BUILD_TOOLS=OFF -DMSA_BUILD_BENCH=OFF > /tmp/cfg.log 2>&1 || { tail -20 /tmp/cfg.log; exit 1; }
cmake --build b -j16 --target msa > /tmp/b1.log 2>&1 || { tail -30 /tmp/b1.log; exit 1; }
nvcc -std=c++17 -arch=sm_90a -O3 -Iinclude .scratch/idx_ab.cu b/libmsa.a -lpthread -o /tmp/ab_new
cp src/cuda/index_topk_kernels.cuh /tmp/new_k.cuh
cp .scratch/old_index_topk_kernels.cuh src/cuda/index_topk_kernels.cuh
cmake --build b -j16 --target msa > /tmp/b2.log 2>&1 || { tail -30 /tmp/b2.log; exit 1; }
nvcc -std=c++17 -arch=sm_90a -O3 -Iinclude .scratch/idx_ab.cu b/libmsa.a -lpthread -o /tmp/ab_old
cp /tmp/new_k.cuh src/cuda/index_topk_kernels.cuh
for r in 1 2; do echo "== new (4ce84a8)"; /tmp/ab_new; echo "== old (d3b09a0)"; /tmp/ab_old; done
