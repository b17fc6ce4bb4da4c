// The merges of split-K sparse attention: sparse_attention_merge_kernel, which combines the
// normalised partial outputs of a row's splits from the workspace, and the in-cluster merge.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "core/launch_policy.h"
#include "cuda/attention/params.cuh"
#include "cuda/common.cuh"

namespace msa {
namespace cuda {

// One split's term of the merge kernel: w = 2^(lse - m), w_sum += w, o += w x o_s, where `live`;
// as selects, not a branch, so that ptxas does not sink the loads feeding it into one (a round
// trip each). The same operations as the in-cluster merge's loop (whose o += w * o_s contracts to
// the same fused multiply-add). m is the splits' largest log2-sum-exp, or 0 when that is -inf
// (every w is then 0 and the caller writes 0 and -inf).
__device__ __forceinline__ void combine_step(bool live, float lse_s, float o_s, float m,
                                             float& w_sum, float& o) {
  const float w = exp2f(lse_s - m);
  w_sum = live ? w_sum + w : w_sum;
  o = live ? fmaf(w, o_s, o) : o;
}

// Combines the splits of one (row, q head) in ascending split order: out = sum_s w_s o_s / sum w,
// w_s = 2^(lse_s - max lse). One thread per output dimension (blockDim.x == head_dim). The first
// kPrefetch splits' partial outputs and log2-sum-exps do not depend on anything else, so each
// thread issues all their loads first, unconditionally (split index clamped; the LSE loads are
// the same address across the CTA), and combines them from registers without a CTA barrier: at
// up to kPrefetch splits the merge costs one memory round trip (every split writes its partials,
// so they are defined). The launcher picks the smallest instance that covers the call's splits,
// as the clamped loads past them are issued all the same. combine_step performs the in-cluster
// merge's operations, so both give the same bits. (Shared memory for the LSEs and a CTA barrier
// were slower: bench/EXPERIMENTS.md: 2026-12-01-attn-merge-registers.)
//
// merge_head_dim is the combine of dim d of one (row, head), the kernel's whole work per thread;
// kInLaunch: the partials were written earlier in the same launch (the persistent decode step),
// so they are read through L2, which the other CTAs' writes reached, not through L1.
template <int kPrefetch, bool kInLaunch = false>
__device__ __forceinline__ void merge_head_dim(const AttnMergeParams& prm, int64_t row,
                                               int64_t head, int d) {
  const int64_t T = prm.num_rows;
  const int64_t hq = prm.num_q_heads;
  const int splits = prm.splits;
  const int64_t head_dim = prm.head_dim;
  const float* po = prm.part_out + (row * hq + head) * head_dim + d;
  const float* pl = prm.part_lse + row * hq + head;
  const int64_t split_stride = T * hq * head_dim;
  auto ld = [](const float* p) { return kInLaunch ? __ldcg(p) : *p; };
  float pre_o[kPrefetch], pre_lse[kPrefetch];
#pragma unroll
  for (int s = 0; s < kPrefetch; ++s) {
    const int64_t sc = min(s, splits - 1);
    pre_o[s] = ld(po + sc * split_stride);
    pre_lse[s] = ld(pl + sc * T * hq);
  }
  float m_all = -INFINITY;
#pragma unroll
  for (int s = 0; s < kPrefetch; ++s) m_all = s < splits ? fmaxf(m_all, pre_lse[s]) : m_all;
  for (int s = kPrefetch; s < splits; ++s) m_all = fmaxf(m_all, ld(pl + s * T * hq));
  const float m_use = m_all == -INFINITY ? 0.0f : m_all;
  float w_sum = 0.0f, acc_o = 0.0f;
#pragma unroll
  for (int s = 0; s < kPrefetch; ++s) {
    combine_step(s < splits, pre_lse[s], pre_o[s], m_use, w_sum, acc_o);
  }
#pragma unroll 16
  for (int s = kPrefetch; s < splits; ++s) {
    combine_step(true, ld(pl + s * T * hq), ld(po + s * split_stride), m_use, w_sum, acc_o);
  }
  const bool empty = m_all == -INFINITY;
  const float o = empty ? 0.0f : acc_o / w_sum;
  store_from_float(prm.out, prm.out_dtype,
                   row * prm.out_stride_row + head * prm.out_stride_head + d, o);
  if (d == 0 && prm.lse != nullptr) {
    prm.lse[row * prm.lse_stride_row + head * prm.lse_stride_head] =
        empty ? -INFINITY : (m_all + log2f(w_sum)) * kLn2;
  }
}

template <int kPrefetch>
__global__ void sparse_attention_merge_kernel(const AttnMergeParams prm) {
  wait_for_prior_grid();  // the partials come from the attention kernel
  merge_head_dim<kPrefetch>(prm, blockIdx.x, blockIdx.y, static_cast<int>(threadIdx.x));
}

// The in-cluster merge of sparse_attention_kernel: the splits of a (row, head chunk) are one
// thread-block cluster (grid.z = cluster z = splits). Each CTA leaves its normalised partial
// outputs ([head][D + 8]) and log2-sum-exps in shared memory; after the cluster barrier, split r
// combines heads r, r + splits, ... from all splits in ascending split order
// (load_split_partials, combine_splits), with the merge kernel's arithmetic (so both give the
// same bits for the same splits), and no CTA exits before the others have read its shared memory
// (leave_cluster). The scratch arrays are the caller's: declared in these functions, they
// changed the attention kernel's register allocation.
constexpr int kAttnMaxClusterSplits = static_cast<int>(detail::kAttnMaxClusterSplits);

// Head hh's partial output (dim d) and log2-sum-exp of every split, from the splits' shared
// memory: all are loaded before any is used (split index clamped; see "Issuing loads" in
// common.cuh), so the combine costs one distributed-shared-memory round trip.
template <int D>
__device__ __forceinline__ void load_split_partials(
    const cooperative_groups::cluster_group& cluster, const int& splits, const int& hh,
    const int& d, float (&lse_s)[kAttnHeads], float (&part)[kAttnHeads][D + 8],
    float (&part_lse)[kAttnMaxClusterSplits], float (&part_o)[kAttnMaxClusterSplits]) {
#pragma unroll
  for (int s = 0; s < kAttnMaxClusterSplits; ++s) {
    const unsigned src = static_cast<unsigned>(min(s, splits - 1));
    part_lse[s] = cluster.map_shared_rank(&lse_s[0], src)[hh];
    part_o[s] = cluster.map_shared_rank(&part[0][0], src)[hh * (D + 8) + d];
  }
}

// The combined output and LSE (natural log) of the first `splits` partials, in ascending split
// order: 0 and -inf where no split saw a key.
__device__ __forceinline__ void combine_splits(const float (&part_lse)[kAttnMaxClusterSplits],
                                               const float (&part_o)[kAttnMaxClusterSplits],
                                               const int& splits, float& out, float& lse) {
  float m_all = -INFINITY;
#pragma unroll
  for (int s = 0; s < kAttnMaxClusterSplits; ++s) {
    if (s < splits) m_all = fmaxf(m_all, part_lse[s]);
  }
  out = 0.0f;
  lse = -INFINITY;
  if (m_all != -INFINITY) {
    float w_sum = 0.0f;
#pragma unroll
    for (int s = 0; s < kAttnMaxClusterSplits; ++s) {
      if (s < splits) {
        const float w = exp2f(part_lse[s] - m_all);
        w_sum += w;
        out += w * part_o[s];
      }
    }
    out /= w_sum;
    lse = (m_all + log2f(w_sum)) * kLn2;
  }
}

// No CTA of the cluster may exit while another still reads its shared memory. Those reads have
// completed (their values went into this thread's output stores), so the arrive needs no release
// fence, and a relaxed one does not wait for the output stores to be performed.
__device__ __forceinline__ void leave_cluster() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

}  // namespace cuda
}  // namespace msa
