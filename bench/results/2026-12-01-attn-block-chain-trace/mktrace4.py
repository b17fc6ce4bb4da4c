# Adds %globaltimer stamps (thread 0 of each CTA) at ten points of the one-block attention
# kernel and three of the merge kernel (diagnostic only). usage: mktrace4.py SRC_ROOT OUT_DIR
import os
import sys

src_dir, out_dir = sys.argv[1], sys.argv[2]
k = open(os.path.join(src_dir, "src/cuda/sparse_attention_kernels.cuh")).read()
c = open(os.path.join(src_dir, "src/cuda/sparse_attention.cu")).read()


def rep(s, old, new, cnt=1):
    assert s.count(old) == cnt, (old, s.count(old))
    return s.replace(old, new)


def rep_after(s, anchor, old, new):
    """Replaces the first `old` after `anchor`."""
    i = s.index(anchor)
    j = s.index(old, i)
    return s[:j] + new + s[j + len(old):]


k = rep(k, "constexpr float kLn2 = 0.6931471805599453f;\n", """constexpr float kLn2 = 0.6931471805599453f;
constexpr int kTraceCtas = 512, kTracePts = 10;
__device__ unsigned long long g_blk_trace[kTraceCtas][kTracePts];
__device__ unsigned long long g_mrg_trace[kTraceCtas][3];
__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t) :: "memory");
  return t;
}
__device__ __forceinline__ int trace_cta() {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}
#define BLK_TRACE(pt) \\
  do { if (threadIdx.x == 0 && trace_cta() < kTraceCtas) g_blk_trace[trace_cta()][pt] = gtimer(); } while (0)
#define MRG_TRACE(pt) \\
  do { if (threadIdx.x == 0 && trace_cta() < kTraceCtas) g_mrg_trace[trace_cta()][pt] = gtimer(); } while (0)
""")
A = "    sparse_attention_block_kernel(const SparseAttnParams prm) {"
k = rep_after(k, A, "  const int W = prm.topk_width;\n", "  const int W = prm.topk_width;\n  BLK_TRACE(0);\n")
k = rep_after(k, A, "  const AttnRow ar = attn_row(prm, cta, flags, early_seq_len, req, kBlockKeys);\n",
              "  const AttnRow ar = attn_row(prm, cta, flags, early_seq_len, req, kBlockKeys);\n  BLK_TRACE(1);\n")
k = rep_after(k, A, "  build_attn_list<kBlockThreads>(prm, tk, live, own, info.req, flags, s_list);\n  __syncthreads();\n",
              "  build_attn_list<kBlockThreads>(prm, tk, live, own, info.req, flags, s_list);\n  __syncthreads();\n  BLK_TRACE(2);\n")
k = rep_after(k, A, "  __syncthreads();  // K (and Q) in shared memory\n", "  __syncthreads();  // K (and Q) in shared memory\n  BLK_TRACE(3);\n")
k = rep_after(k, A, "  float mx[2] = {-INFINITY, -INFINITY};\n", "  BLK_TRACE(4);\n  float mx[2] = {-INFINITY, -INFINITY};\n")
k = rep_after(k, A, "  __syncthreads();\n  // kTokenScales: v_exp", "  __syncthreads();\n  BLK_TRACE(5);\n  // kTokenScales: v_exp")
k = rep_after(k, A, "  __syncthreads();  // P, the row sums and V\n", "  __syncthreads();  // P, the row sums and V\n  BLK_TRACE(6);\n")
k = rep_after(k, A, "  float factor[2], lse[2];\n", "  BLK_TRACE(7);\n  float factor[2], lse[2];\n")
k = rep_after(k, A, "  allow_dependent_launch();\n  const int64_t T = prm.rows.num_rows;\n",
              "  allow_dependent_launch();\n  BLK_TRACE(8);\n  const int64_t T = prm.rows.num_rows;\n")
k = rep(k, "    if (warp == 0 && c == 0)\n      prm.part_lse[(split * T + row) * prm.num_q_heads + head0 + hh] = lse[r];\n  }\n}\n",
        "    if (warp == 0 && c == 0)\n      prm.part_lse[(split * T + row) * prm.num_q_heads + head0 + hh] = lse[r];\n  }\n  BLK_TRACE(9);\n}\n")
k = rep(k, "  wait_for_prior_grid();  // the partials come from the attention kernel\n",
        "  MRG_TRACE(0);\n  wait_for_prior_grid();  // the partials come from the attention kernel\n  MRG_TRACE(1);\n")
k = rep(k, "        empty ? -INFINITY : (m_all + log2f(w_sum)) * kLn2;\n  }\n}\n",
        "        empty ? -INFINITY : (m_all + log2f(w_sum)) * kLn2;\n  }\n  MRG_TRACE(2);\n}\n")
c = rep(c, "#include <cstdint>\n", "#include <cstdint>\n#include <cstdio>\n#include <vector>\n")
c = rep(c, "Status run_problem(const AttnProblem& pb, Workspace workspace, Stream stream) {\n", r'''void dump_trace(cudaStream_t st) {
  cudaStreamCaptureStatus cs;
  if (cudaStreamIsCapturing(st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return;
  cudaDeviceSynchronize();
  std::vector<unsigned long long> t(kTraceCtas * kTracePts), m(kTraceCtas * 3);
  cudaMemcpyFromSymbol(t.data(), g_blk_trace, t.size() * 8);
  cudaMemcpyFromSymbol(m.data(), g_mrg_trace, m.size() * 8);
  unsigned long long t0 = ~0ull;
  int n = 0, nm = 0;
  for (int q = 0; q < kTraceCtas; ++q) {
    if (t[q * kTracePts] != 0) { t0 = std::min(t0, t[q * kTracePts]); ++n; }
    if (m[q * 3] != 0) ++nm;
  }
  if (n > 0) {
    std::fprintf(stderr, "TRACE block ctas %d merge ctas %d (us after the first entry: min / median / max)\n", n, nm);
    const char* names[kTracePts] = {"entry", "loads", "list", "K", "qk", "max", "P/V", "pv", "trig", "exit"};
    auto row = [&](const std::vector<unsigned long long>& v, int stride, int p, const char* name) {
      std::vector<double> x;
      for (int q = 0; q < kTraceCtas; ++q) {
        const unsigned long long w = v[q * stride + p];
        if (w != 0) x.push_back(((long long)(w - t0)) * 1e-3);
      }
      if (x.empty()) return;
      std::sort(x.begin(), x.end());
      std::fprintf(stderr, "TRACE %6s %6.2f %6.2f %6.2f\n", name, x.front(), x[x.size() / 2], x.back());
    };
    for (int p = 0; p < kTracePts; ++p) row(t, kTracePts, p, names[p]);
    const char* mn[3] = {"mentry", "mwait", "mexit"};
    for (int p = 0; p < 3 && nm > 0; ++p) row(m, 3, p, mn[p]);
  }
  void* a = nullptr;
  cudaGetSymbolAddress(&a, g_blk_trace);
  cudaMemset(a, 0, t.size() * 8);
  cudaGetSymbolAddress(&a, g_mrg_trace);
  cudaMemset(a, 0, m.size() * 8);
  cudaDeviceSynchronize();
}

Status run_problem(const AttnProblem& pb, Workspace workspace, Stream stream) {
  dump_trace(static_cast<cudaStream_t>(stream.cuda_stream));
''')
os.makedirs(os.path.join(out_dir, "src/cuda"), exist_ok=True)
open(os.path.join(out_dir, "src/cuda/sparse_attention_kernels.cuh"), "w").write(k)
open(os.path.join(out_dir, "src/cuda/sparse_attention.cu"), "w").write(c)
