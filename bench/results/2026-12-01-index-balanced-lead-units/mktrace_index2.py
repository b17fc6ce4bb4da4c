# Per-CTA %globaltimer trace of the balanced index score kernel (diagnostic only): entry, exit,
# SM id, share size and piece count of every CTA; the slowest and fastest CTAs are printed by the
# op's next uncaptured call. usage: mktrace_index2.py SRC_ROOT OUT_DIR
import os
import sys

src_dir, out_dir = sys.argv[1], sys.argv[2]
k = open(os.path.join(src_dir, "src/cuda/index_topk_kernels.cuh")).read()
c = open(os.path.join(src_dir, "src/cuda/index_topk.cu")).read()


def rep(s, old, new):
    assert s.count(old) == 1, (old, s.count(old))
    return s.replace(old, new)


k = rep(k, "constexpr int kSelectThreads = 256;\n", """constexpr int kSelectThreads = 256;
constexpr int kTrCtas = 1024;
__device__ unsigned long long g_sc_trace[kTrCtas][8];
__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t) :: "memory");
  return t;
}
__device__ __forceinline__ unsigned smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %smid;" : "=r"(s));
  return s;
}
""")
k = rep(k, """    while (detail::balanced_piece(s_units_end, nreq, share, piece_blocks, at, &bpc, &next)) {
      score_piece(at.tile, at.b0, bpc, at.b0 == 0);
      at = next;
    }
""", """    int npieces = 0;
    while (detail::balanced_piece(s_units_end, nreq, share, piece_blocks, at, &bpc, &next)) {
      score_piece(at.tile, at.b0, bpc, at.b0 == 0);
      if (threadIdx.x == 0 && npieces < 3) g_sc_trace[blockIdx.y][4 + npieces] = gtimer();
      ++npieces;
      at = next;
    }
    if (threadIdx.x == 0) {
      g_sc_trace[blockIdx.y][2] = smid();
      g_sc_trace[blockIdx.y][3] = (static_cast<unsigned long long>(npieces) << 32) | static_cast<unsigned long long>(share.end - share.begin);
      g_sc_trace[blockIdx.y][7] = share.begin;
    }
""")
k = rep(k, """    index_score_mma_balanced_kernel(const IndexScoreParams prm) {
  score_mma<CacheT, CH, kF16, ScoreGrid::kBalanced, kNTiles, kM>(prm, nullptr);
""", """    index_score_mma_balanced_kernel(const IndexScoreParams prm) {
  if (threadIdx.x == 0) g_sc_trace[blockIdx.y][0] = gtimer();
  score_mma<CacheT, CH, kF16, ScoreGrid::kBalanced, kNTiles, kM>(prm, nullptr);
  __syncthreads();
  if (threadIdx.x == 0) g_sc_trace[blockIdx.y][1] = gtimer();
""")
c = rep(c, "#include <cstdint>\n", "#include <cstdint>\n#include <algorithm>\n#include <cstdio>\n#include <vector>\n")
c = rep(c, "Status run_problem(const IndexProblem& pb, Workspace workspace, Stream stream) {\n", r'''void dump_trace(cudaStream_t st) {
  cudaStreamCaptureStatus cs;
  if (cudaStreamIsCapturing(st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return;
  cudaDeviceSynchronize();
  std::vector<unsigned long long> t(kTrCtas * 8);
  cudaMemcpyFromSymbol(t.data(), g_sc_trace, t.size() * 8);
  unsigned long long t0 = ~0ull;
  std::vector<int> ctas;
  for (int q = 0; q < kTrCtas; ++q) if (t[8 * q] != 0) { t0 = std::min(t0, t[8 * q]); ctas.push_back(q); }
  if (!ctas.empty()) {
    auto us = [&](unsigned long long v) { return v == 0 ? -1.0 : ((long long)(v - t0)) * 1e-3; };
    std::sort(ctas.begin(), ctas.end(), [&](int a, int b) { return t[8 * a + 1] < t[8 * b + 1]; });
    auto line = [&](int q) {
      std::fprintf(stderr, "TRACE cta %3d sm %3llu entry %6.2f exit %7.2f units %3llu begin %6llu pieces %llu ends %7.2f %7.2f %7.2f\n", q, t[8 * q + 2], us(t[8 * q]), us(t[8 * q + 1]), t[8 * q + 3] & 0xFFFFFFFFull, t[8 * q + 7], t[8 * q + 3] >> 32, us(t[8 * q + 4]), us(t[8 * q + 5]), us(t[8 * q + 6]));
    };
    const size_t n = ctas.size();
    for (size_t i = 0; i < std::min<size_t>(6, n); ++i) line(ctas[i]);
    std::fprintf(stderr, "TRACE ...\n");
    for (size_t i = n > 14 ? n - 14 : 0; i < n; ++i) line(ctas[i]);
    // Mean exit by piece count and by share size.
    for (unsigned long long p = 1; p <= 3; ++p) {
      double s = 0; int m = 0;
      for (int q : ctas) if ((t[8 * q + 3] >> 32) == p) { s += us(t[8 * q + 1]); ++m; }
      if (m) std::fprintf(stderr, "TRACE pieces %llu: %d ctas, mean exit %.2f\n", p, m, s / m);
    }
  }
  void* a = nullptr;
  cudaGetSymbolAddress(&a, g_sc_trace);
  cudaMemset(a, 0, t.size() * 8);
  cudaDeviceSynchronize();
}

Status run_problem(const IndexProblem& pb, Workspace workspace, Stream stream) {
  dump_trace(static_cast<cudaStream_t>(stream.cuda_stream));
''')
os.makedirs(os.path.join(out_dir, "src/cuda"), exist_ok=True)
open(os.path.join(out_dir, "src/cuda/index_topk_kernels.cuh"), "w").write(k)
open(os.path.join(out_dir, "src/cuda/index_topk.cu"), "w").write(c)
