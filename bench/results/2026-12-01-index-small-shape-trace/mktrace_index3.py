# Adds %globaltimer stamps (thread 0 of each CTA) to copies of the balanced index score kernel and
# the select kernels (diagnostic only). usage: mktrace_index.py SRC_ROOT OUT_DIR
import os
import sys

src_dir, out_dir = sys.argv[1], sys.argv[2]
k = open(os.path.join(src_dir, "src/cuda/index_topk_kernels.cuh")).read()
c = open(os.path.join(src_dir, "src/cuda/index_topk.cu")).read()


def rep(s, old, new):
    assert s.count(old) == 1, (old, s.count(old))
    return s.replace(old, new)


k = rep(k, "constexpr int kSelectThreads = 256;\n", """constexpr int kSelectThreads = 256;
constexpr int kTrCtas = 4096;
__device__ unsigned long long g_sc_trace[kTrCtas][2];
__device__ unsigned long long g_sel_trace[kTrCtas][3];
__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t) :: "memory");
  return t;
}
__device__ __forceinline__ int tr_cta() { return blockIdx.x + gridDim.x * blockIdx.y; }
#define SC_TRACE(pt) do { if (threadIdx.x == 0 && tr_cta() < kTrCtas) g_sc_trace[tr_cta()][pt] = gtimer(); } while (0)
#define SEL_TRACE(pt) do { if (threadIdx.x == 0 && tr_cta() < kTrCtas) g_sel_trace[tr_cta()][pt] = gtimer(); } while (0)
""")
k = k.replace("  wait_for_prior_grid();  // the scores come from the score kernel\n",
              "  wait_for_prior_grid();  // the scores come from the score kernel\n  SEL_TRACE(1);\n")
k = rep(k, """  __shared__ SelectSmem sm;
  select_row_topk<kKeys>(prm, blockIdx.x, blockIdx.y, sm);
""", """  __shared__ SelectSmem sm;
  SEL_TRACE(0);
  select_row_topk<kKeys>(prm, blockIdx.x, blockIdx.y, sm);
  SEL_TRACE(2);
""")
k = rep(k, """  __shared__ SelectSmem sm;
  select_row_topk_by_rank(prm, blockIdx.x, blockIdx.y, sm);
""", """  __shared__ SelectSmem sm;
  SEL_TRACE(0);
  select_row_topk_by_rank(prm, blockIdx.x, blockIdx.y, sm);
  SEL_TRACE(2);
""")
k = rep(k, """    index_score_mma_kernel(const IndexScoreParams prm) {
  if (prm.early_select) allow_dependent_launch();
  score_mma<CacheT, CH, kF16, ScoreGrid::kStatic, kNTiles, kM>(prm, nullptr);
""", """    index_score_mma_kernel(const IndexScoreParams prm) {
  SC_TRACE(0);
  if (prm.early_select) allow_dependent_launch();
  score_mma<CacheT, CH, kF16, ScoreGrid::kStatic, kNTiles, kM>(prm, nullptr);
  __syncthreads();
  SC_TRACE(1);
""")
k = rep(k, """    index_score_mma_balanced_kernel(const IndexScoreParams prm) {
  score_mma<CacheT, CH, kF16, ScoreGrid::kBalanced, kNTiles, kM>(prm, nullptr);
""", """    index_score_mma_balanced_kernel(const IndexScoreParams prm) {
  SC_TRACE(0);
  score_mma<CacheT, CH, kF16, ScoreGrid::kBalanced, kNTiles, kM>(prm, nullptr);
  __syncthreads();
  SC_TRACE(1);
""")
c = rep(c, "#include <cstdint>\n", "#include <cstdint>\n#include <algorithm>\n#include <cstdio>\n#include <vector>\n")
c = rep(c, "Status run_problem(const IndexProblem& pb, Workspace workspace, Stream stream) {\n", r'''void dump_trace(cudaStream_t st) {
  cudaStreamCaptureStatus cs;
  if (cudaStreamIsCapturing(st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return;
  cudaDeviceSynchronize();
  std::vector<unsigned long long> t(kTrCtas * 2), m(kTrCtas * 3);
  cudaMemcpyFromSymbol(t.data(), g_sc_trace, t.size() * 8);
  cudaMemcpyFromSymbol(m.data(), g_sel_trace, m.size() * 8);
  unsigned long long t0 = ~0ull;
  for (int q = 0; q < kTrCtas; ++q) if (t[2 * q] != 0) t0 = std::min(t0, t[2 * q]);
  if (t0 != ~0ull) {
    auto pct = [&](const std::vector<unsigned long long>& v, int stride, int pt, const char* name) {
      std::vector<double> x;
      for (int q = 0; q < kTrCtas; ++q) if (v[q * stride + pt] != 0) x.push_back(((long long)(v[q * stride + pt] - t0)) * 1e-3);
      if (x.empty()) return;
      std::sort(x.begin(), x.end());
      auto at = [&](double f) { return x[std::min(x.size() - 1, (size_t)(f * (x.size() - 1) + 0.5))]; };
      std::fprintf(stderr, "TRACE %-8s n %4zu min %7.2f p10 %7.2f p50 %7.2f p90 %7.2f max %7.2f\n", name, x.size(), at(0), at(0.1), at(0.5), at(0.9), at(1));
    };
    pct(t, 2, 0, "s_entry"); pct(t, 2, 1, "s_exit");
    pct(m, 3, 0, "x_entry"); pct(m, 3, 1, "x_wait"); pct(m, 3, 2, "x_exit");
  }
  void* a = nullptr;
  cudaGetSymbolAddress(&a, g_sc_trace);
  cudaMemset(a, 0, t.size() * 8);
  cudaGetSymbolAddress(&a, g_sel_trace);
  cudaMemset(a, 0, m.size() * 8);
  cudaDeviceSynchronize();
}

Status run_problem(const IndexProblem& pb, Workspace workspace, Stream stream) {
  dump_trace(static_cast<cudaStream_t>(stream.cuda_stream));
''')
os.makedirs(os.path.join(out_dir, "src/cuda"), exist_ok=True)
open(os.path.join(out_dir, "src/cuda/index_topk_kernels.cuh"), "w").write(k)
open(os.path.join(out_dir, "src/cuda/index_topk.cu"), "w").write(c)
