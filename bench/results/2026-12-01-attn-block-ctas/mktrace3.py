# Adds %globaltimer stamps (thread 0 of each CTA) to a copy of the one-block attention kernel and
# the merge kernel (diagnostic only). usage: mktrace3.py SRC_ROOT OUT_DIR
import os
import sys

src_dir, out_dir = sys.argv[1], sys.argv[2]
k = open(os.path.join(src_dir, "src/cuda/sparse_attention_kernels.cuh")).read()
c = open(os.path.join(src_dir, "src/cuda/sparse_attention.cu")).read()


def rep(s, old, new):
    assert s.count(old) == 1, (old, s.count(old))
    return s.replace(old, new)


k = rep(k, "constexpr float kLn2 = 0.6931471805599453f;\n", """constexpr float kLn2 = 0.6931471805599453f;
constexpr int kTraceCtas = 512, kTracePts = 8;
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
# one-block kernel
k = rep(k, "  const int W = prm.topk_width;\n\n  // The independent loads first (top-k entry, sequence length, Q), then their uses: one round\n",
        "  const int W = prm.topk_width;\n  BLK_TRACE(0);\n\n  // The independent loads first (top-k entry, sequence length, Q), then their uses: one round\n")
k = rep(k, "  int32_t* flags = (split == 0 && hc == 0) ? prm.error_flags : nullptr;\n  const RowInfo info =\n      resolve_row_of(prm.rows, row, (tid == 0 && kvh == 0) ? flags : nullptr, early_seq_len, req);\n  if (row == 0 && tid == 0 && kvh == 0) check_cu_seqlens(prm.rows, flags);\n  const int64_t pos = info.pos_base + row;\n  const bool live = info.req >= 0 && pos >= 0;\n  const int64_t own =\n      live ? div_u32(static_cast<uint32_t>(pos), static_cast<uint32_t>(kBlockKeys)) : int64_t{-1};\n  build_attn_list<kBlockThreads>",
        "  BLK_TRACE(1);\n  int32_t* flags = (split == 0 && hc == 0) ? prm.error_flags : nullptr;\n  const RowInfo info =\n      resolve_row_of(prm.rows, row, (tid == 0 && kvh == 0) ? flags : nullptr, early_seq_len, req);\n  if (row == 0 && tid == 0 && kvh == 0) check_cu_seqlens(prm.rows, flags);\n  const int64_t pos = info.pos_base + row;\n  const bool live = info.req >= 0 && pos >= 0;\n  const int64_t own =\n      live ? div_u32(static_cast<uint32_t>(pos), static_cast<uint32_t>(kBlockKeys)) : int64_t{-1};\n  build_attn_list<kBlockThreads>")
k = rep(k, "  __syncthreads();\n  float logit_scale = prm.scale_log2;\n", "  __syncthreads();\n  BLK_TRACE(2);\n  float logit_scale = prm.scale_log2;\n")
k = rep(k, "  __syncthreads();  // K (and Q) in shared memory\n", "  __syncthreads();  // K (and Q) in shared memory\n  BLK_TRACE(3);\n")
k = rep(k, "  __syncthreads();\n  float m_use[2], m_all[2];\n", "  __syncthreads();\n  BLK_TRACE(4);\n  float m_use[2], m_all[2];\n")
k = rep(k, "  __syncthreads();  // P, the row sums and V\n", "  __syncthreads();  // P, the row sums and V\n  BLK_TRACE(5);\n")
k = rep(k, "  float factor[2], lse[2];\n", "  BLK_TRACE(6);\n  float factor[2], lse[2];\n")
k = rep(k, "    if (warp == 0 && c == 0)\n      prm.part_lse[(split * T + row) * prm.num_q_heads + head0 + hh] = lse[r];\n  }\n}\n",
        "    if (warp == 0 && c == 0)\n      prm.part_lse[(split * T + row) * prm.num_q_heads + head0 + hh] = lse[r];\n  }\n  BLK_TRACE(7);\n}\n")
# merge kernel
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
    // Per point: earliest and latest CTA, us after the first CTA's entry.
    std::fprintf(stderr, "TRACE block ctas %d merge ctas %d\n", n, nm);
    const char* names[8] = {"entry", "loads", "list", "K", "max", "P/V", "PV", "exit"};
    for (int p = 0; p < kTracePts; ++p) {
      unsigned long long lo = ~0ull, hi = 0;
      for (int q = 0; q < kTraceCtas; ++q) {
        const unsigned long long v = t[q * kTracePts + p];
        if (v == 0) continue;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      std::fprintf(stderr, "TRACE %6s %6.2f %6.2f\n", names[p], (lo - t0) * 1e-3, (hi - t0) * 1e-3);
    }
    const char* mn[3] = {"mentry", "mwait", "mexit"};
    for (int p = 0; p < 3 && nm > 0; ++p) {
      unsigned long long lo = ~0ull, hi = 0;
      for (int q = 0; q < kTraceCtas; ++q) {
        const unsigned long long v = m[q * 3 + p];
        if (v == 0) continue;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      std::fprintf(stderr, "TRACE %6s %6.2f %6.2f\n", mn[p], ((long long)(lo - t0)) * 1e-3, ((long long)(hi - t0)) * 1e-3);
    }
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
