// Timeline of the sparse attention kernel at batch 1 (in-cluster plan: 16 splits of 8 subtiles),
// %globaltimer per CTA phase, L2 flushed by a 256 MiB read before each launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>
__device__ unsigned long long g_tl[1 << 12];
#include "sak_tl.cuh"
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
__global__ void empty_k(SparseAttnParams) {}
#define CK(x)                                         \
  do {                                                \
    cudaError_t e_ = (x);                             \
    if (e_ != cudaSuccess) {                          \
      printf("%s: %s\n", #x, cudaGetErrorString(e_)); \
      return 1;                                       \
    }                                                 \
  } while (0)
int main(int argc, char** argv) {
  const bool fp8 = argc > 1;
  const int NB = 64, BS = 128, D = 128, HQ = 16;
  size_t kv_elems = (size_t)NB * BS * D;
  void *k, *v;
  __nv_bfloat16 *q, *out;
  CK(cudaMalloc(&k, kv_elems * 2));
  CK(cudaMalloc(&v, kv_elems * 2));
  CK(cudaMalloc(&q, HQ * D * 2));
  CK(cudaMalloc(&out, HQ * D * 2));
  std::vector<__nv_bfloat16> h(kv_elems);
  for (size_t i = 0; i < kv_elems; ++i)
    h[i] = __float2bfloat16((float)((i * 2654435761u) % 1000) / 1000.f - 0.5f);
  CK(cudaMemcpy(k, h.data(), kv_elems * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(v, h.data(), kv_elems * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(q, h.data(), HQ * D * 2, cudaMemcpyHostToDevice));
  int32_t *bt, *sl, *tk, *flags;
  float* scale;
  CK(cudaMalloc(&bt, NB * 4));
  CK(cudaMalloc(&sl, 4));
  CK(cudaMalloc(&tk, 16 * 4));
  CK(cudaMalloc(&flags, 4));
  CK(cudaMalloc(&scale, 8));
  float hs[2] = {1.0f / 16, 1.0f / 16};
  CK(cudaMemcpy(scale, hs, 8, cudaMemcpyHostToDevice));
  std::vector<int> hb(NB);
  for (int i = 0; i < NB; ++i) hb[i] = (i * 29) % NB;
  CK(cudaMemcpy(bt, hb.data(), NB * 4, cudaMemcpyHostToDevice));
  int s = NB * BS;
  CK(cudaMemcpy(sl, &s, 4, cudaMemcpyHostToDevice));
  std::vector<int> ht;
  for (int i = 0; i < 63; i += 4)
    ht.push_back(i);  // 0, 4, ..., 60 (ascending, as the index op writes)
  ht.back() = 63;
  CK(cudaMemcpy(tk, ht.data(), 64, cudaMemcpyHostToDevice));
  CK(cudaMemset(flags, 0, 4));
  size_t fb = 256u << 20;
  int4* fbuf;
  CK(cudaMalloc(&fbuf, fb));
  CK(cudaMemset(fbuf, 1, fb));
  int* sink;
  CK(cudaMalloc(&sink, 4));
  SparseAttnParams prm{};
  prm.q = q;
  prm.q_dtype = DType::kBF16;
  prm.q_stride_row = HQ * D;
  prm.q_stride_head = D;
  prm.k = k;
  prm.v = v;
  prm.k_stride_page = BS * D;
  prm.k_stride_head = BS * D;
  prm.k_stride_tok = D;
  prm.v_stride_page = BS * D;
  prm.v_stride_head = BS * D;
  prm.v_stride_tok = D;
  prm.num_cache_blocks = NB;
  prm.scale_mode = fp8 ? KvScaleMode::kPerLayer : KvScaleMode::kNone;
  prm.k_scale = scale;
  prm.v_scale = scale + 1;
  prm.block_table = bt;
  prm.bt_stride_req = NB;
  prm.bt_stride_block = 1;
  RowMap rm;
  rm.seq_lens = sl;
  rm.num_requests = 1;
  rm.query_len = 1;
  rm.num_rows = 1;
  rm.max_blocks = NB;
  rm.block_size = BS;
  prm.rows = rm;
  prm.topk = tk;
  prm.tk_stride_head = 16;
  prm.tk_stride_row = 16;
  prm.tk_stride_col = 1;
  prm.topk_width = 16;
  prm.num_q_heads = HQ;
  prm.group = 16;
  prm.head_chunks = 1;
  prm.scale_log2 = 0.0884f * 1.4427f;
  prm.out = out;
  prm.out_dtype = DType::kBF16;
  prm.out_stride_row = HQ * D;
  prm.out_stride_head = D;
  prm.error_flags = flags;
  prm.splits = 16;
  prm.subtiles_per_split = 8;
  prm.cluster = true;
  auto kern = fp8 ? (void (*)(SparseAttnParams))sparse_attention_kernel<uint8_t, 128, false>
                  : (void (*)(SparseAttnParams))sparse_attention_kernel<__nv_bfloat16, 128, false>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CK(cudaFuncSetAttribute(empty_k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 1;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 16;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(1, 1, 16);
  cfg.blockDim = dim3(128);
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const int kIt = 30, kCtas = 16, kMarks = 13;
  for (int which = 0; which < 2; ++which) {
    std::vector<double> ev, mx[kMarks], mn[kMarks];
    for (int it = 0; it < kIt; ++it) {
      flush_k<<<528, 512>>>(fbuf, fb / 16, sink);
      cudaEventRecord(e0);
      if (which == 0)
        CK(cudaLaunchKernelEx(&cfg, kern, prm));
      else
        CK(cudaLaunchKernelEx(&cfg, empty_k, prm));
      cudaEventRecord(e1);
      CK(cudaDeviceSynchronize());
      float a;
      cudaEventElapsedTime(&a, e0, e1);
      if (it < 5) continue;
      ev.push_back(a * 1e3);
      if (which) continue;
      std::vector<unsigned long long> tl(kCtas * 16);
      CK(cudaMemcpyFromSymbol(tl.data(), g_tl, tl.size() * 8));
      unsigned long long t0 = ~0ull;
      for (int c = 0; c < kCtas; ++c) t0 = std::min(t0, tl[c * 16]);
      for (int p = 0; p < kMarks; ++p) {
        double hi = 0, lo = 1e18;
        for (int c = 0; c < kCtas; ++c) {
          double t = (double)(tl[c * 16 + p] - t0);
          hi = std::max(hi, t);
          lo = std::min(lo, t);
        }
        mx[p].push_back(hi);
        mn[p].push_back(lo);
      }
    }
    auto med = [](std::vector<double> x) {
      std::sort(x.begin(), x.end());
      return x.empty() ? 0.0 : x[x.size() / 2];
    };
    if (which == 0) {
      printf("%s attention kernel, 16-CTA cluster: event %.2f us\n", fp8 ? "e4m3" : "bf16",
             med(ev));
      const char* names[kMarks] = {"entry",       "tk-issued",  "q-issued",     "seqlen",
                                   "q-in-smem",   "list(bt)",   "barrier",      "1st-subtile",
                                   "loop-end",    "warp-merge", "cluster-sync", "merged+stored",
                                   "exit-barrier"};
      for (int p = 0; p < kMarks; ++p)
        printf("  %-14s min %6.0f  max %6.0f ns\n", names[p], med(mn[p]), med(mx[p]));
    } else {
      printf("empty kernel, same 16-CTA cluster launch: event %.2f us\n", med(ev));
    }
  }
  int hf;
  CK(cudaMemcpy(&hf, flags, 4, cudaMemcpyDeviceToHost));
  printf("flags %d\n", hf);
  return 0;
}
