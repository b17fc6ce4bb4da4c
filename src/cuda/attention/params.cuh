// Sparse attention (spec A5): the constants and kernel parameters shared by the decode kernels,
// and the K/V element types their MMAs take. src/cuda/attention/launch.cu describes the work
// decomposition.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "core/attention_problem.h"
#include "cuda/common.cuh"
#include "cuda/mma.cuh"
#include "cuda/row_map.cuh"
#include "msa/cache.h"

namespace msa {
namespace cuda {

constexpr int kAttnThreads = 128;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kAttnHeads = 16;  // q heads per CTA: the M dimension of the MMA
constexpr int kMaxTopkWidth = 256;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// In order of first use ("Kernel parameters" in common.cuh): the prologue's fields (the grid's
// decomposition and top-k ids, the row map, Q and the block table) fill the first three 64-byte
// lines; then the scales and flags, the main loop's K/V addressing (one line), the outputs. The
// cache fields are those of KvCacheDevice (kv_cache.cuh), spread over the lines that use them
// rather than kept as one struct.
struct SparseAttnParams {
  int32_t group, head_chunks;
  int32_t topk_width;
  DType q_dtype;
  const int32_t* topk;  // [Hkv, >= T, topk_width]
  int64_t tk_stride_head, tk_stride_row, tk_stride_col;
  RowMap rows;
  const void* q;  // [T, Hq, D]
  int64_t q_stride_row, q_stride_head;
  KvScaleMode scale_mode;
  float scale_log2;            // softmax_scale * log2(e): logits live in the log2 domain
  const int32_t* block_table;  // [num_requests, max_blocks]
  int64_t bt_stride_req, bt_stride_block;
  int64_t num_cache_blocks;
  const float* k_scale;  // per-layer: [1]; per-token-head: [Hkv, num_blocks * block_size]
  const float* v_scale;
  int32_t* error_flags;
  int32_t subtiles_per_split;
  int32_t num_q_heads;
  int64_t ks_stride_head, ks_stride_slot, vs_stride_head, vs_stride_slot;
  const void* k;  // [num_blocks, Hkv, block_size, D] through strides, last stride 1
  const void* v;
  int64_t k_stride_page, k_stride_head, k_stride_tok;
  int64_t v_stride_page, v_stride_head, v_stride_tok;
  int32_t splits;
  bool cluster;     // splits > 1: merged in-cluster (true) or by the merge kernel
  float* part_out;  // [splits, T, Hq, D] for the merge kernel
  float* part_lse;  // [splits, T, Hq], log2 domain
  void* out;        // [T, Hq, D]
  DType out_dtype;
  int64_t out_stride_row, out_stride_head;
  float* lse;  // optional [T, Hq], natural log
  int64_t lse_stride_row, lse_stride_head;
};
// The struct starts at parameter offset 0x210, so its lines begin at 0x30, 0x70, 0xb0, ...
static_assert(offsetof(SparseAttnParams, rows) == 0x30 && offsetof(SparseAttnParams, q) == 0x70 &&
                  offsetof(SparseAttnParams, k) == 0xf0 &&
                  offsetof(SparseAttnParams, splits) == 0x130,
              "SparseAttnParams: a field moved across a 64-byte line");

// The merge kernel's arguments: only what it reads, in a few cache lines, where SparseAttnParams
// spreads them over several hundred bytes. A kernel's parameters are read through the constant
// cache, which is cold at its start, and those misses were a visible share of the merge kernel's
// stalls (bench/EXPERIMENTS.md: 2026-12-01-attn-merge-params).
struct AttnMergeParams {
  const float* part_out;  // [splits, T, Hq, D]
  const float* part_lse;  // [splits, T, Hq], log2 domain
  void* out;
  float* lse;  // optional
  int64_t num_rows, num_q_heads, head_dim;
  int64_t out_stride_row, out_stride_head, lse_stride_row, lse_stride_head;
  int32_t splits;
  DType out_dtype;
};

// A call's attention parameters, unsplit (splits 1, no partials), which the launcher adjusts to
// its plan; and the merge kernel's, from those (launch.cu).
SparseAttnParams make_attn_params(const detail::AttentionProblem& pb);
AttnMergeParams make_merge_params(const SparseAttnParams& prm, int64_t head_dim);
// Whether the CUDA sparse attention serves the call (kNotSupported naming what it does not), and
// whether its one-block kernel can run it (block_kernel.cuh).
Status attention_supported(const detail::AttentionProblem& pb);
bool attention_block_kernel_fits(const detail::AttentionProblem& pb);

template <typename CacheT>
struct KvTraits;
template <>
struct KvTraits<__nv_bfloat16> {
  using Raw = uint4;  // 8 elements
  static constexpr bool kHalfMma = false;
};
template <>
struct KvTraits<__half> {
  using Raw = uint4;
  static constexpr bool kHalfMma = true;
};
template <>
struct KvTraits<uint8_t> {
  using Raw = uint2;
  static constexpr bool kHalfMma = true;  // e4m3 goes to f16 exactly (kv_words)
};

// A K or V load's MMA words (element 2i in the low half of word i): bf16/f16 caches as stored
// (their scale mode is always none), e4m3 converted to exact f16 pairs, unscaled (the kernel's
// kE4m3F16 path applies the scales to the logits and probabilities).
__device__ __forceinline__ uint4 kv_words(uint4 raw) { return raw; }

__device__ __forceinline__ uint4 kv_words(uint2 raw) {
  return make_uint4(e4m3x2_to_f16x2<false>(raw.x), e4m3x2_to_f16x2<true>(raw.x),
                    e4m3x2_to_f16x2<false>(raw.y), e4m3x2_to_f16x2<true>(raw.y));
}

__device__ __forceinline__ float scale_at(const float* s, int64_t stride_head, int64_t stride_slot,
                                          int64_t head, int64_t slot) {
  return __ldg(s + head * stride_head + slot * stride_slot);
}

}  // namespace cuda
}  // namespace msa
