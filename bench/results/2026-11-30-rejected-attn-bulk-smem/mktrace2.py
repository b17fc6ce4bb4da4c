# Adds %globaltimer stamps to a copy of the attention kernel (diagnostic only).
# usage: mktrace2.py SRC_ROOT OUT_DIR   (SRC_ROOT holds src/cuda/sparse_attention*.c*)
import sys, os
src_dir, out_dir = sys.argv[1], sys.argv[2]
k = open(os.path.join(src_dir, 'src/cuda/sparse_attention_kernels.cuh')).read()
c = open(os.path.join(src_dir, 'src/cuda/sparse_attention.cu')).read()
def rep(s, old, new):
    assert s.count(old) == 1, (old, s.count(old))
    return s.replace(old, new)
k = rep(k, "constexpr float kLn2 = 0.6931471805599453f;\n", """constexpr float kLn2 = 0.6931471805599453f;
constexpr int kTraceCtas = 256, kTracePts = 12;
__device__ unsigned long long g_attn_trace[kTraceCtas][kTracePts];
__device__ unsigned long long g_attn_wait[kTraceCtas][8];
__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t) :: "memory");
  return t;
}
__device__ __forceinline__ int trace_cta() {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}
#define ATTN_TRACE(pt) \\
  do { if (threadIdx.x == 0 && trace_cta() < kTraceCtas) g_attn_trace[trace_cta()][pt] = gtimer(); } while (0)
#define ATTN_TRACE_MINMAX(pmin, pmax) \\
  do { if (threadIdx.x % 32 == 0 && trace_cta() < kTraceCtas) { const unsigned long long t_ = gtimer(); \\
    atomicMin(&g_attn_trace[trace_cta()][pmin], t_); atomicMax(&g_attn_trace[trace_cta()][pmax], t_); } } while (0)
""")
k = rep(k, "  const int nh = min(kAttnHeads, prm.group - hc * kAttnHeads);\n", "  const int nh = min(kAttnHeads, prm.group - hc * kAttnHeads);\n  ATTN_TRACE(0);\n")
k = rep(k, "  __syncthreads();\n  const int n_sel = s_nsel;\n", "  __syncthreads();\n  const int n_sel = s_nsel;\n  ATTN_TRACE(2);\n")
if "mbar_wait_first_phase(&s_bar[i - sub_begin]);" in k:
    k = rep(k, "      mbar_wait_first_phase(&s_bar[i - sub_begin]);\n", "      mbar_wait_first_phase(&s_bar[i - sub_begin]);\n      if (lane == 0 && trace_cta() < kTraceCtas) g_attn_wait[trace_cta()][(i - sub_begin) & 7] = gtimer();\n")
    k = rep(k, "  const int v_smem = prm.bulk_packed ? D : 16 * D;\n", "  const int v_smem = prm.bulk_packed ? D : 16 * D;\n  ATTN_TRACE(10);\n")
k = rep(k, "  // Merge the 4 warps' partial softmax states in fixed warp order.\n", "  ATTN_TRACE_MINMAX(3, 4);\n  // Merge the 4 warps' partial softmax states in fixed warp order.\n")
k = rep(k, "  cluster.sync();\n  const int splits = prm.splits;\n", "  cluster.sync();\n  ATTN_TRACE(8);\n  const int splits = prm.splits;\n")
k = rep(k, """  asm volatile("barrier.cluster.wait.aligned;\\n" ::: "memory");\n}""", """  asm volatile("barrier.cluster.wait.aligned;\\n" ::: "memory");\n  ATTN_TRACE(9);\n}""")
k = rep(k, "  if (prm.splits == 1) {\n", "  ATTN_TRACE(7);\n  if (prm.splits == 1) {\n")
c = rep(c, "#include <cstdint>\n", "#include <cstdint>\n#include <cstdio>\n#include <vector>\n")
c = rep(c, "Status run_problem(const AttnProblem& pb, Workspace workspace, Stream stream) {\n", r'''void dump_trace(cudaStream_t st) {
  cudaStreamCaptureStatus cs;
  if (cudaStreamIsCapturing(st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return;
  cudaDeviceSynchronize();
  std::vector<unsigned long long> t(kTraceCtas * kTracePts);
  cudaMemcpyFromSymbol(t.data(), g_attn_trace, t.size() * 8);
  unsigned long long t0 = ~0ull, tend = 0;
  int n = 0;
  for (int c = 0; c < kTraceCtas; ++c) {
    if (t[c * kTracePts] == 0) continue;
    t0 = std::min(t0, t[c * kTracePts]);
    tend = std::max(tend, t[c * kTracePts + 9]);
    ++n;
  }
  if (n > 0) {
    std::fprintf(stderr, "TRACE ctas %d span %.2f us (entry list issued wait0 waitN loop0 loopN merged release end)\n", n, (tend - t0) * 1e-3);
    for (int c = 0; c < kTraceCtas && c < 16; ++c) {
      if (t[c * kTracePts] == 0) continue;
      std::fprintf(stderr, "TRACE cta %3d:", c);
      for (int p : {0, 2, 10, 5, 6, 3, 4, 7, 8, 9}) {
        const unsigned long long v = t[c * kTracePts + p];
        if (v == 0 || v == ~0ull) std::fprintf(stderr, "     -");
        else std::fprintf(stderr, " %5.2f", (static_cast<long long>(v - t0)) * 1e-3);
      }
      std::fprintf(stderr, "\n");
    }
    std::vector<unsigned long long> w(kTraceCtas * 8);
    cudaMemcpyFromSymbol(w.data(), g_attn_wait, w.size() * 8);
    for (int c = 0; c < kTraceCtas && c < 4; ++c) {
      std::fprintf(stderr, "WAITS cta %3d:", c);
      for (int j = 0; j < 8; ++j) {
        const unsigned long long v = w[c * 8 + j];
        if (v == 0) std::fprintf(stderr, "     -");
        else std::fprintf(stderr, " %5.2f", (static_cast<long long>(v - t0)) * 1e-3);
      }
      std::fprintf(stderr, "\n");
    }
  }
  std::vector<unsigned long long> z(t.size(), 0);
  for (int cc = 0; cc < kTraceCtas; ++cc) { z[cc * kTracePts + 3] = ~0ull; z[cc * kTracePts + 5] = ~0ull; }
  cudaMemcpyToSymbol(g_attn_trace, z.data(), z.size() * 8);
  cudaDeviceSynchronize();
}

Status run_problem(const AttnProblem& pb, Workspace workspace, Stream stream) {
  dump_trace(static_cast<cudaStream_t>(stream.cuda_stream));
''')
os.makedirs(os.path.join(out_dir, 'src/cuda'), exist_ok=True)
open(os.path.join(out_dir, 'src/cuda/sparse_attention_kernels.cuh'), 'w').write(k)
open(os.path.join(out_dir, 'src/cuda/sparse_attention.cu'), 'w').write(c)
