// decode_step_kernel: one sparse decode step (index scores, top-k selection, one-block attention
// and the split merge) as one cooperative launch; docs/decode_step.md describes the design.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/attention/block_kernel.cuh"
#include "cuda/attention/merge_kernel.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/common.cuh"
#include "cuda/index/params.cuh"
#include "cuda/index/score_mma.cuh"
#include "cuda/index/select.cuh"

namespace msa {
namespace cuda {

constexpr int kStepThreads = 256;
static_assert(kStepThreads == kScoreThreads && kStepThreads == kSelectThreads &&
                  kStepThreads == kBlockThreads,
              "every phase runs on all threads of a CTA");
// Splits whose partials a merging thread loads before combining (any split count is merged, in
// the same order and with the same bits, see merge_head_dim).
constexpr int kStepMergePrefetch = 16;

struct DecodeStepParams {
  IndexScoreParams score;    // the balanced grid: CTA blockIdx.y of gridDim.y
  IndexSelectParams select;  // scores: score.scores
  SparseAttnParams attn;     // splits = topk width; topk: select.out
  AttnMergeParams merge;
  uint32_t* tickets;  // [rows x head groups]: finished splits of each (row, head group)
  int32_t head_groups;
};

// Phase 3's (row, head group, split) item i: splits innermost, so the CTAs that take a row's
// items in one pass are adjacent and its merge waits for the fewest passes.
struct StepItem {
  int64_t row;
  uint32_t group;
  int split;
};
__device__ __forceinline__ StepItem step_item(int64_t i, int32_t head_groups, int32_t splits) {
  const int64_t rg = i / splits;
  StepItem it;
  it.split = static_cast<int>(i - rg * splits);
  it.row = rg / head_groups;
  it.group = static_cast<uint32_t>(rg - it.row * head_groups);
  return it;
}

// CH: index head dim / 64. Launched cooperatively with grid (1, CTAs), every CTA resident.
template <int CH>
__global__ void __launch_bounds__(kStepThreads, 1) decode_step_kernel(const DecodeStepParams p) {
  extern __shared__ __align__(16) uint16_t step_smem[];
  __shared__ SelectSmem select_smem;
  __shared__ bool merges;
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  const int64_t ctas = gridDim.y, cta = blockIdx.y;
  const int64_t T = p.select.rows.num_rows;
  const int64_t heads = p.score.num_heads;

  // 1. Block maxima of every visible block, shared out over all CTAs. The tickets of phase 3
  // start at zero in every launch (read only after the barriers below).
  if (cta == 0) {
    for (int64_t i = threadIdx.x; i < T * p.head_groups; i += kStepThreads) p.tickets[i] = 0;
  }
  score_mma<__nv_bfloat16, CH, false, ScoreGrid::kBalanced, 1, 1>(p.score, nullptr);
  grid.sync();

  // 2. Top-k of every (row, index head); the scores are read through L2 (__ldcg).
  for (int64_t i = cta; i < T * heads; i += ctas) {
    const int64_t h = i / T, row = i - h * T;
    if (p.select.rows.max_blocks <= kSelectThreads) {
      select_row_topk_by_rank(p.select, row, h, select_smem);
    } else {
      select_row_topk<kSelectKeysPerThread>(p.select, row, h, select_smem);
    }
  }
  grid.sync();

  // 3. One selected block per item; the last split of a (row, head group) to finish merges it.
  const int32_t splits = p.attn.splits;
  const int64_t items = T * p.head_groups * splits;
  for (int64_t i = cta; i < items; i += ctas) {
    const StepItem it = step_item(i, p.head_groups, splits);
    const AttnCta a = attn_cta_at(p.attn, it.row, it.group, it.split);
    attend_block<__nv_bfloat16, false, true>(p.attn, a, step_smem);
    // Every thread's partials are performed before the ticket is taken (release); the merging
    // CTA fences again before it reads the others' (acquire).
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      const uint32_t done = atomicAdd(p.tickets + it.row * p.head_groups + it.group, 1u);
      merges = done == static_cast<uint32_t>(splits - 1);
    }
    __syncthreads();
    if (merges) {
      __threadfence();
      const int dim = static_cast<int>(p.merge.head_dim);
      for (int hh = threadIdx.x / dim; hh < a.nh; hh += kStepThreads / dim) {
        merge_head_dim<kStepMergePrefetch, true>(p.merge, it.row, a.head0 + hh,
                                                 static_cast<int>(threadIdx.x) % dim);
      }
    }
    __syncthreads();  // shared memory and `merges` are the next item's
  }
}

}  // namespace cuda
}  // namespace msa
