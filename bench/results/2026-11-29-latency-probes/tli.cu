#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <vector>
__device__ unsigned long long g_tl[1 << 16];
#include "ik_tl.cuh"
using namespace msa;
using namespace msa::cuda;
__global__ void flush_k(const int4* p, size_t n, int* sink) {
  int acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int4 v = p[i];
    acc ^= v.x ^ v.w;
  }
  if (acc == 0x12345) *sink = acc;
}
int main() {
  size_t fb = 256u << 20;
  int4* fbuf;
  cudaMalloc(&fbuf, fb);
  cudaMemset(fbuf, 1, fb);
  int* sink;
  cudaMalloc(&sink, 4);
  cudaEvent_t e0, e1, e2;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventCreate(&e2);
  for (int NB : {64, 1024}) {
    const int BS = 128, DI = 128;
    __nv_bfloat16 *cache, *q;
    cudaMalloc(&cache, (size_t)NB * BS * DI * 2);
    cudaMalloc(&q, DI * 2);
    std::vector<__nv_bfloat16> h((size_t)NB * BS * DI);
    for (size_t i = 0; i < h.size(); ++i) {
      uint32_t x = (uint32_t)i * 2654435761u;
      x ^= x >> 13;
      x *= 0x5bd1e995u;
      x ^= x >> 15;
      h[i] = __float2bfloat16((float)(x & 0xFFFF) / 65536.f - 0.5f);
    }
    cudaMemcpy(cache, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(q, h.data(), DI * 2, cudaMemcpyHostToDevice);
    int32_t *bt, *sl, *out, *flags;
    cudaMalloc(&bt, NB * 4);
    cudaMalloc(&sl, 4);
    cudaMalloc(&out, 16 * 4);
    cudaMalloc(&flags, 4);
    cudaMemset(flags, 0, 4);
    std::vector<int> hb(NB);
    for (int i = 0; i < NB; ++i) hb[i] = (i * 7) % NB;
    cudaMemcpy(bt, hb.data(), NB * 4, cudaMemcpyHostToDevice);
    int s = NB * BS;
    cudaMemcpy(sl, &s, 4, cudaMemcpyHostToDevice);
    float* scores;
    cudaMalloc(&scores, NB * 4);
    RowMap rm;
    rm.seq_lens = sl;
    rm.num_requests = 1;
    rm.query_len = 1;
    rm.num_rows = 1;
    rm.max_blocks = NB;
    rm.block_size = BS;
    IndexScoreParams p{};
    p.index_q = q;
    p.q_dtype = DType::kBF16;
    p.q_stride_row = DI;
    p.q_stride_head = DI;
    p.q_stride_dim = 1;
    p.cache = cache;
    p.cache_stride_page = BS * DI;
    p.cache_stride_key = DI;
    p.num_cache_blocks = NB;
    p.block_table = bt;
    p.bt_stride_req = NB;
    p.bt_stride_block = 1;
    p.rows = rm;
    p.num_heads = 1;
    p.head_dim = DI;
    p.rows_per_tile = 1;
    p.blocks_per_cta = 1;
    p.scores = scores;
    p.error_flags = flags;
    IndexSelectParams sp{};
    sp.scores = scores;
    sp.rows = rm;
    sp.topk = 16;
    sp.init_blocks = 1;
    sp.local_blocks = 2;
    sp.out = out;
    sp.out_stride_head = 16;
    sp.out_stride_row = 16;
    sp.out_stride_col = 1;
    sp.out_cols = 16;
    std::vector<double> ka, kb, sc[5], se[5];
    for (int it = 0; it < 25; ++it) {
      flush_k<<<528, 512>>>(fbuf, fb / 16, sink);
      cudaEventRecord(e0);
      index_score_mma_kernel<__nv_bfloat16, 2><<<dim3(1, NB), 256>>>(p);
      cudaEventRecord(e1);
      std::vector<unsigned long long> tl(NB * 8);
      cudaDeviceSynchronize();
      cudaMemcpyFromSymbol(tl.data(), g_tl, NB * 8 * 8);
      cudaEventRecord(e1);
      index_select_kernel<<<dim3(1, 1), 256>>>(sp);
      cudaEventRecord(e2);
      cudaDeviceSynchronize();
      std::vector<unsigned long long> tl2(8);
      cudaMemcpyFromSymbol(tl2.data(), g_tl, 8 * 8);
      float a, b;
      cudaEventElapsedTime(&a, e0, e1);
      cudaEventElapsedTime(&b, e1, e2);
      if (it < 5) continue;
      ka.push_back(a * 1e3);
      kb.push_back(b * 1e3);
      unsigned long long t0 = ~0ull;
      for (int c = 0; c < NB; ++c) t0 = std::min(t0, tl[c * 8]);
      for (int ph : {0, 1, 2, 4}) {
        double mx = 0;
        for (int c = 0; c < NB; ++c) mx = std::max(mx, (double)(tl[c * 8 + ph] - t0));
        sc[ph].push_back(mx);
      }
      for (int ph : {1, 2, 4}) se[ph].push_back((double)(tl2[ph] - tl2[0]));
    }
    auto med = [](std::vector<double> x) {
      std::sort(x.begin(), x.end());
      return x[x.size() / 2];
    };
    printf(
        "NB %4d: event score %.1f us (incl sync gap) select %.1f us | score max ns: entry %.0f "
        "prologue %.0f tiles %.0f end %.0f | select ns: loaded %.0f radix %.0f end %.0f\n",
        NB, med(ka), med(kb), med(sc[0]), med(sc[1]), med(sc[2]), med(sc[4]), med(se[1]),
        med(se[2]), med(se[4]));
    int hf;
    cudaMemcpy(&hf, flags, 4, cudaMemcpyDeviceToHost);
    printf("flags %d err %s\n", hf, cudaGetErrorString(cudaGetLastError()));
  }
}
