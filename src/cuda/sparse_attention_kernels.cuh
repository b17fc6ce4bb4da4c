// Device code of sparse attention (spec A5): a tensor-core (mma.sync m16n8k16) kernel with the
// q heads of a GQA group as the M dimension, and the split-K LSE merge (in-cluster through
// distributed shared memory, or a merge kernel). Launchers and the work decomposition rationale
// are in sparse_attention.cu.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/launch_policy.h"
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
// lines; then the scales and flags, the main loop's K/V addressing (one line), the outputs.
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

// Thread tid's Q elements in MMA fragment order: item it covers fragment slot i = tid +
// it * kAttnThreads (k-step i / 32, lane i % 32), heads gg and gg + 8 of the 16-head chunk, 4
// consecutive dims each. All loads are issued before any conversion (heads past the group load
// the chunk's last head and are zeroed afterwards; see "Issuing loads" in common.cuh).
template <typename QT, int kQItems>
__device__ __forceinline__ void load_q_items(const SparseAttnParams& prm, int64_t row, int head0,
                                             int nh, int tid, float (&qv)[kQItems][2][4]) {
  const QT* q = static_cast<const QT*>(prm.q) + row * prm.q_stride_row;
  QT raw[kQItems][2][4];
#pragma unroll
  for (int it = 0; it < kQItems; ++it) {
    const int i = tid + it * kAttnThreads;
    const int kk = i >> 5, ln = i & 31;
    const int d0 = 32 * (kk >> 1) + 8 * (ln & 3) + 4 * (kk & 1);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int hh = min((ln >> 2) + 8 * r, nh - 1);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        raw[it][r][e] = __ldg(q + (head0 + hh) * prm.q_stride_head + d0 + e);
    }
  }
#pragma unroll
  for (int it = 0; it < kQItems; ++it) {
    const int ln = (tid + it * kAttnThreads) & 31;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const bool real = (ln >> 2) + 8 * r < nh;
#pragma unroll
      for (int e = 0; e < 4; ++e) qv[it][r][e] = real ? to_float(raw[it][r][e]) : 0.0f;
    }
  }
}

// The (row, KV head, head chunk, split) of an attention CTA (grid x, y = KV head x head chunk,
// z), and its q heads: head0 .. head0 + nh - 1.
struct AttnCta {
  int64_t row;
  int kvh, hc, split, head0, nh;
};
__device__ __forceinline__ AttnCta attn_cta(const SparseAttnParams& prm) {
  AttnCta a;
  a.row = blockIdx.x;
  a.kvh = static_cast<int>(div_u32(blockIdx.y, static_cast<uint32_t>(prm.head_chunks)));
  a.hc = static_cast<int>(blockIdx.y) - a.kvh * prm.head_chunks;
  a.split = blockIdx.z;
  a.head0 = a.kvh * prm.group + a.hc * kAttnHeads;
  a.nh = min(kAttnHeads, prm.group - a.hc * kAttnHeads);
  return a;
}

// The row of a CTA resolved (request, position), whether it attends at all (live), and its own
// block (-1 when not live). flags: the error flags this CTA reports to (one CTA per row and KV
// head, so a bad entry costs one atomic); thread 0 of KV head 0 reports the row's own errors.
struct AttnRow {
  RowInfo info;
  int64_t pos, own;
  bool live;
};
__device__ __forceinline__ AttnRow attn_row(const SparseAttnParams& prm, const AttnCta& a,
                                            int32_t* flags, uint32_t early_seq_len, int64_t req,
                                            int64_t block_size) {
  AttnRow r;
  r.info = resolve_row_of(prm.rows, a.row, (threadIdx.x == 0 && a.kvh == 0) ? flags : nullptr,
                          early_seq_len, req);
  if (a.row == 0 && threadIdx.x == 0 && a.kvh == 0) check_cu_seqlens(prm.rows, flags);
  r.pos = r.info.pos_base + a.row;
  r.live = r.info.req >= 0 && r.pos >= 0;
  // pos < 2^31 (a position within an int32 sequence length); block sizes are usually powers of
  // two, which div_u32 divides by a shift.
  r.own = r.live ? div_u32(static_cast<uint32_t>(r.pos), static_cast<uint32_t>(block_size))
                 : int64_t{-1};
  return r;
}

// The largest of the warps' values (fmaxf: NaNs drop out).
template <int kWarps>
__device__ __forceinline__ float max_over_warps(const float (&warp_max)[kWarps]) {
  float mx = warp_max[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, warp_max[w]);
  return mx;
}

// e4m3 K/V: the power of two 2^q_exp that takes the CTA's largest |q| (the warps' maxima) to
// [2^14, 2^15), so f16 holds every bf16 q exactly down to 2^-31 of it. mx = f 2^e with f in
// [0.5, 1) -> mx 2^(15 - e); zero or infinite Q keeps its scale, and the cap keeps 2^-q_exp a
// normal float.
template <int kWarps>
__device__ __forceinline__ int q_scale_exp(const float (&warp_max)[kWarps]) {
  const float mx = max_over_warps(warp_max);
  int e = 0;
  frexpf(mx, &e);
  return mx > 0.0f && mx < INFINITY ? min(15 - e, 100) : 0;
}

// A row's selection as shared by the CTAs of both attention kernels: the valid ids in
// ascending order with their pages (list_id / list_page, nsel of them).
struct AttnList {
  int32_t id[kMaxTopkWidth];
  int32_t page[kMaxTopkWidth];
  uint8_t first[kMaxTopkWidth];
  int32_t list_id[kMaxTopkWidth];
  int32_t list_page[kMaxTopkWidth];
  int32_t nsel;
};

// Builds the row's selection as a set: ids beyond the visible blocks (own: the row's own block,
// -1 when the row is not live) or with a bad page are skipped (and reported to flags),
// duplicates count once, and the list is sorted ascending (spec A5 order). Entry e of the row is
// held by thread e % kThreads as tk[e / kThreads]. The caller synchronises the CTA before it
// reads the list.
template <int kThreads, int kTkPer>
__device__ __forceinline__ void build_attn_list(const SparseAttnParams& prm,
                                                const int32_t (&tk)[kTkPer], bool live, int64_t own,
                                                int64_t req, int32_t* flags, AttnList& sl) {
  static_assert(kTkPer * kThreads >= kMaxTopkWidth, "every top-k entry has a thread");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int W = prm.topk_width;
  auto validate = [&](int32_t raw, int32_t& id, int32_t& page) {
    id = -1;
    page = 0;
    if (!live) return;
    if (raw > own) {
      raise_error(flags, kDeviceErrorTopkId);
    } else if (raw >= 0) {
      const int32_t pg = prm.block_table[req * prm.bt_stride_req + raw * prm.bt_stride_block];
      if (pg < 0 || pg >= prm.num_cache_blocks) {
        raise_error(flags, kDeviceErrorBlockId);
      } else {
        id = raw;
        page = pg;
      }
    }
  };
  if (W <= 32) {
    // The usual case (top-16): warp 0 builds the list with warp votes, no CTA barrier.
    if (warp == 0) {
      int32_t id, page;
      validate(lane < W ? tk[0] : -1, id, page);
      // The index op writes its lists front-packed and strictly ascending; then each valid id is
      // its own rank, and the general ranking below (about 240 instructions, while the other
      // warps wait at the barrier) is not needed. Both give the same list.
      const int32_t prev = __shfl_up_sync(0xFFFFFFFFu, id, 1);
      const bool in_order = id < 0 || lane == 0 || (prev >= 0 && prev < id);
      if (__all_sync(0xFFFFFFFFu, in_order)) {
        const uint32_t valid = __ballot_sync(0xFFFFFFFFu, id >= 0);
        if (id >= 0) {
          sl.list_id[lane] = id;
          sl.list_page[lane] = page;
        }
        if (lane == 0) sl.nsel = __popc(valid);
      } else {
        const uint32_t same = __match_any_sync(0xFFFFFFFFu, id);
        const bool first = id >= 0 && __ffs(same) - 1 == lane;
        const uint32_t firsts = __ballot_sync(0xFFFFFFFFu, first);
        int rank = 0;
#pragma unroll
        for (int f = 0; f < 32; ++f) {
          const int32_t other = __shfl_sync(0xFFFFFFFFu, id, f);
          rank += ((firsts >> f) & 1u) && other < id ? 1 : 0;
        }
        if (first) {
          sl.list_id[rank] = id;
          sl.list_page[rank] = page;
        }
        if (lane == 0) sl.nsel = __popc(firsts);
      }
    }
  } else {
#pragma unroll
    for (int r = 0; r < kTkPer; ++r) {
      const int e = tid + r * kThreads;
      if (e < W) validate(tk[r], sl.id[e], sl.page[e]);
    }
    __syncthreads();
    for (int e = tid; e < W; e += kThreads) {
      const int32_t id = sl.id[e];
      bool first = id >= 0;
      for (int f = 0; f < e && first; ++f) first = sl.id[f] != id;
      sl.first[e] = first ? 1 : 0;
    }
    __syncthreads();
    for (int e = tid; e < W; e += kThreads) {
      if (!sl.first[e]) continue;
      const int32_t id = sl.id[e];
      int rank = 0;
      for (int f = 0; f < W; ++f) rank += (sl.first[f] && sl.id[f] < id) ? 1 : 0;
      sl.list_id[rank] = id;
      sl.list_page[rank] = sl.page[e];
    }
    if (tid == 0) {
      int n = 0;
      for (int f = 0; f < W; ++f) n += sl.first[f];
      sl.nsel = n;
    }
  }
}

// One CTA per (row, KV head x 16-head chunk, split). Fragment layouts (lane = 4 * g + c):
//  * QK^T: A = Q [16 heads x 16 dims], B = K^T. The reduction dimension may be permuted freely
//    as long as Q and K agree, so k-step kk = 2t + half maps MMA k-slots {2c, 2c+1, 2c+8, 2c+9}
//    to dims 32t + 8c + 4 half + {0, 1, 2, 3}: each lane then reads its B operand for key g of
//    an 8-key n-tile as whole 16-byte runs K[g][32t + 8c, +8), straight from global memory.
//  * PV: A = P from the S accumulators (the usual register reuse), B = V [16 keys x 8 dims].
//    Output columns are permuted instead: n-tile (vh, nd) column g is dim 64 vh + 8g + nd, so a
//    lane reads 16-byte runs V[key][64 vh + 8g, +8) of its 4 keys {2c, 2c+1, 2c+8, 2c+9} and
//    builds each B register with one byte permute.
// Each warp runs its own online softmax over 16-key subtiles w, w+4, ... of the split's range
// of the row's ascending block list; the 4 warps are merged in fixed order at the end.
//
// kTwoBuffers selects the form of the register double buffer (see the main loop).
//
// e4m3 K/V (kE4m3F16): K and V go to f16 exactly, one conversion per element pair, and the MMAs
// run in f16; scales apply to fp32 values instead of to each element: a per-layer K scale joins
// the logit scale and its V scale the output normalisation; per-token-head K scales multiply the
// logits of their keys, and V scales the probabilities, relative to a power of two 2^v_exp of
// the largest V scale the warp has seen (so the f16 probabilities stay in f16's normal range),
// which the output normalisation takes back. For power-of-two scales (1, or the usual calibrated
// 2^-n) that gives the same values as scaling each element; other scales differ by fp32 rounding.
// The bf16 MMA would need e4m3 -> f16 -> f32, a scale and a rounding to bf16 per pair: six
// instructions instead of one, which made the e4m3 loop instruction-bound. Q is scaled by a power
// of two 2^q_exp that puts the CTA's largest |q| in [2^14, 2^15), so f16 holds every bf16 q
// exactly down to 2^-31 of it (and every f16 q), and the logit scale takes 2^-q_exp back;
// probabilities are rounded to f16. kTokenScales: the instance for per-token-head scales (e4m3
// only), whose scale registers the others do not carry.
template <typename CacheT, int D, bool kTwoBuffers, bool kTokenScales>
__global__ void __launch_bounds__(kAttnThreads)
    sparse_attention_kernel(const SparseAttnParams prm) {
  constexpr bool kE4m3F16 = std::is_same_v<CacheT, uint8_t>;
  static_assert(kE4m3F16 || !kTokenScales, "only e4m3 caches have scales");
  using Raw = typename KvTraits<CacheT>::Raw;
  constexpr bool kHalfMma = KvTraits<CacheT>::kHalfMma;
  constexpr int kSteps = D / 16;   // k-steps of QK^T
  constexpr int kChunks = D / 32;  // 8-element K runs per lane per key
  constexpr int kHalves = D / 64;  // 64-column groups of V and O
  constexpr int kOutTiles = D / 8;

  __shared__ uint4 q_frag[kSteps][32];
  __shared__ AttnList s_list;
  __shared__ float s_m[kAttnWarps][kAttnHeads];
  __shared__ float s_l[kAttnWarps][kAttnHeads];
  __shared__ float s_lse[kAttnHeads];   // the CTA's log2-sum-exp per head
  __shared__ float s_qmax[kAttnWarps];  // kE4m3F16: each warp's largest |q|
  // Per-warp outputs, row h = head: lane (g, c) stores the pair {dim da, dim da + 8} of n-tile n
  // as one float2 at 8n + 2c. The row stride D + 8 puts the 16 lanes of a half-warp on distinct
  // banks (a plain [h][d] layout had a 16-way conflict on these stores).
  __shared__ __align__(8) float s_red[kAttnWarps][kAttnHeads][D + 8];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const AttnCta cta = attn_cta(prm);
  const int64_t row = cta.row;
  const int kvh = cta.kvh, hc = cta.hc, split = cta.split, head0 = cta.head0, nh = cta.nh;
  // Every load that does not depend on another is issued before any of them is used (the
  // top-k ids, Q, the row's sequence length), so the prologue costs one memory round trip plus
  // the block-table one ("Issuing loads" in common.cuh).
  constexpr int kTkPer = kMaxTopkWidth / kAttnThreads;
  constexpr int kQItems = kSteps * 32 / kAttnThreads;
  static_assert(kQItems * kAttnThreads == kSteps * 32, "Q fragments per thread");
  const int W = prm.topk_width;  // >= 1 (validated)
  // The row's request in a decode batch (row < 2^31; unused with cu_seqlens_q).
  const int64_t req =
      div_u32(static_cast<uint32_t>(row), static_cast<uint32_t>(prm.rows.query_len));
  const uint32_t early_seq_len = ld_decode_seq_len_of(prm.rows, req);
  int32_t tk[kTkPer];
#pragma unroll
  for (int r = 0; r < kTkPer; ++r) {
    // In bounds for every row < T (topk is [Hkv, >= T, W]); padding rows ignore the value, and
    // entries e >= W (clamped here) are ignored where they are used.
    tk[r] = __ldg(prm.topk + kvh * prm.tk_stride_head + row * prm.tk_stride_row +
                  min(tid + r * kAttnThreads, W - 1) * prm.tk_stride_col);
  }
  const float k_layer = prm.scale_mode == KvScaleMode::kPerLayer ? __ldg(prm.k_scale) : 1.0f;
  const float v_layer = prm.scale_mode == KvScaleMode::kPerLayer ? __ldg(prm.v_scale) : 1.0f;
  // Q, converted once to the MMA element type; heads past the group are zero rows.
  float qv[kQItems][2][4];
  switch (prm.q_dtype) {
    case DType::kBF16:
      load_q_items<__nv_bfloat16>(prm, row, head0, nh, tid, qv);
      break;
    case DType::kF16:
      load_q_items<__half>(prm, row, head0, nh, tid, qv);
      break;
    default:
      load_q_items<float>(prm, row, head0, nh, tid, qv);
      break;
  }

  // One CTA per (row, KV head) reports bad values, so a bad entry costs one atomic.
  int32_t* flags = (split == 0 && hc == 0) ? prm.error_flags : nullptr;
  const int64_t bs = prm.rows.block_size;
  const AttnRow ar = attn_row(prm, cta, flags, early_seq_len, req, bs);
  const RowInfo& info = ar.info;
  const int64_t pos = ar.pos, own = ar.own;
  const bool live = ar.live;
  // Q goes to shared memory here, while its loads (issued with the top-k and sequence-length
  // ones) are the same round trip: written later it would wait a second one, and holding it in
  // registers across the block-table lookup lets the compiler sink the loads instead. On the
  // kE4m3F16 path its scale needs the whole CTA's largest |q|, so each warp's goes to shared
  // memory here (which uses the loads just as well) and Q follows in scale_q.
  auto store_q = [&](float q_mul) {
#pragma unroll
    for (int it = 0; it < kQItems; ++it) {
      const int i = tid + it * kAttnThreads;
      const auto& v = qv[it];
      q_frag[i >> 5][i & 31] = make_uint4(pack2<kHalfMma>(v[0][0] * q_mul, v[0][1] * q_mul),
                                          pack2<kHalfMma>(v[1][0] * q_mul, v[1][1] * q_mul),
                                          pack2<kHalfMma>(v[0][2] * q_mul, v[0][3] * q_mul),
                                          pack2<kHalfMma>(v[1][2] * q_mul, v[1][3] * q_mul));
    }
  };
  if constexpr (kE4m3F16) {
    float mx = 0.0f;  // fmaxf drops NaNs
#pragma unroll
    for (int it = 0; it < kQItems; ++it) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
#pragma unroll
        for (int e = 0; e < 4; ++e) mx = fmaxf(mx, fabsf(qv[it][r][e]));
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
    if (lane == 0) s_qmax[warp] = mx;
  } else {
    store_q(1.0f);
  }

  build_attn_list<kAttnThreads>(prm, tk, live, own, info.req, flags, s_list);
  __syncthreads();
  const int n_sel = s_list.nsel;
  // kE4m3F16: Q's fragments and the logit scale, from the warps' maxima; the main loop calls it
  // once its first loads are in flight, which then cover the barrier it needs. The other paths
  // use prm.scale_log2 as it is.
  float logit_scale = 0.0f;
  auto scale_q = [&] {
    const int q_exp = q_scale_exp(s_qmax);
    store_q(ldexpf(1.0f, q_exp));
    logit_scale = prm.scale_log2 * k_layer * ldexpf(1.0f, -q_exp);
    __syncthreads();
  };

  float acc[kOutTiles][4];
#pragma unroll
  for (int n = 0; n < kOutTiles; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
  }
  float m_run[2] = {-INFINITY, -INFINITY};  // rows g and g + 8, log2 domain
  // Per-token-head V scales: the accumulators hold the outputs times 2^-v_exp (see process).
  // It starts at the smallest normal exponent, so the first positive scale sets it and
  // 2^-v_exp stays finite when every scale is subnormal.
  int v_exp = -126;
  float l_run[2] = {0.0f, 0.0f};  // this lane's share of the row sums

  const CacheT* k_all = static_cast<const CacheT*>(prm.k);
  const CacheT* v_all = static_cast<const CacheT*>(prm.v);
  const int spb = static_cast<int>(bs / 16);
  // Subtiles past the row's position can only be the tail of its own block, which is the last
  // (largest) id of the ascending list, so the visible subtiles are a prefix of the list.
  // Subtile counts and offsets within a page fit 32 bits (check_supported bounds block_size x
  // token stride), so the loop's index arithmetic is 32-bit and incremental.
  // That last subtile may reach past the position: its keys there get P = 0, but their V rows
  // still enter the P.V MMA, where a NaN or Inf in a slot not written yet would give 0 * NaN.
  // load_tile reads the row's last visible key (row tail_last of subtile tail_i, the last
  // visible one) and its scales in their place, a finite value whose product with 0 is 0.
  int n_valid = n_sel * spb;
  int tail_i = -1, tail_last = 15;
  if (n_sel > 0 && s_list.list_id[n_sel - 1] == own) {
    const int in_block = static_cast<int>(pos - own * bs);
    n_valid = (n_sel - 1) * spb + in_block / 16 + 1;
    tail_i = n_valid - 1;
    tail_last = in_block % 16;
  }
  const int sub_begin = split * prm.subtiles_per_split;
  const int sub_end = min(n_valid, sub_begin + prm.subtiles_per_split);
  constexpr bool per_token = kTokenScales;
  const int k_tok = static_cast<int>(prm.k_stride_tok);
  const int v_tok = static_cast<int>(prm.v_stride_tok);
  // This lane's element offsets from a subtile's first key: K rows g and g + 8 at column 8c,
  // V rows 2c, 2c + 1, 2c + 8, 2c + 9 at column 8g; the chunk columns are immediates.
  const int k_lane[2] = {g * k_tok + 8 * c, (g + 8) * k_tok + 8 * c};
  auto v_row = [&](int q4) { return 2 * c + (q4 & 1) + 8 * (q4 >> 1); };
  int v_lane[4];
#pragma unroll
  for (int q4 = 0; q4 < 4; ++q4) v_lane[q4] = v_row(q4) * v_tok + 8 * g;
  const CacheT* k_head = k_all + kvh * prm.k_stride_head;
  const CacheT* v_head = v_all + kvh * prm.v_stride_head;

  // A subtile's raw K/V fragments and scales.
  // ksc / vsc: per-token-head scales of the lane's score and probability columns, keys
  // {2c, 2c + 1, 2c + 8, 2c + 9} (q4 = key bit 0 + 2 x key bit 3), which are also the V rows it
  // loads.
  struct Tile {
    Raw kr[2][kChunks];
    Raw vr[4][kHalves];
    float ksc[per_token ? 4 : 1];
    float vsc[per_token ? 4 : 1];
  };
  // V rows and scales of a subtile, rows past `last` replaced by row `last`.
  auto load_v_rows = [&](int64_t page, int off, const CacheT* vb, int last, Tile& t) {
#pragma unroll
    for (int q4 = 0; q4 < 4; ++q4) {
      const int v_off = v_row(q4) <= last ? v_lane[q4] : last * v_tok + 8 * g;
#pragma unroll
      for (int vh = 0; vh < kHalves; ++vh) {
        t.vr[q4][vh] = __ldg(reinterpret_cast<const Raw*>(vb + v_off + 64 * vh));
      }
    }
    if constexpr (per_token) {
      const int64_t slot0 = page * bs + off;
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4) {
        const int64_t slot = slot0 + min(v_row(q4), last);
        t.ksc[q4] = scale_at(prm.k_scale, prm.ks_stride_head, prm.ks_stride_slot, kvh, slot);
        t.vsc[q4] = scale_at(prm.v_scale, prm.vs_stride_head, prm.vs_stride_slot, kvh, slot);
      }
    }
  };
  // Subtile ti = (li, sb): the sb-th 16-key subtile of list entry li.
  auto load_tile = [&](int ti, int li, int sb, Tile& t) {
    const int64_t page = s_list.list_page[li];
    const int off = sb * 16;
    const CacheT* kb = k_head + page * prm.k_stride_page + off * k_tok;
    const CacheT* vb = v_head + page * prm.v_stride_page + off * v_tok;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int tt = 0; tt < kChunks; ++tt) {
        t.kr[nt][tt] = __ldg(reinterpret_cast<const Raw*>(kb + k_lane[nt] + 32 * tt));
      }
    }
    // Rows past the position (only in subtile tail_i) read the last visible one (see
    // tail_last). For 16-bit K/V the test is a branch (uniform across the warp), so the other
    // subtiles' loads take no clamps: bf16 attention 0.3-0.6 us faster at batch 16-64 on the
    // H200, while the e4m3 instances were up to 1.4 us slower that way
    // (bench/results/2026-11-30-attn-tail-branch-16bit-ab/).
    if constexpr (sizeof(CacheT) == 2) {
      if (ti == tail_i) {
        load_v_rows(page, off, vb, tail_last, t);
      } else {
        load_v_rows(page, off, vb, 15, t);
      }
    } else {
      load_v_rows(page, off, vb, ti == tail_i ? tail_last : 15, t);
    }
  };
  // Advances (li, sb) by n subtiles along the list.
  auto advance = [&](int& li, int& sb, int n) {
    sb += n;
    while (sb >= spb) {
      sb -= spb;
      ++li;
    }
  };

  // The online-softmax update of this warp with subtile (li, sb), whose fragments are in t.
  auto process = [&](int li, int sb, const Tile& t) {
    const int off = sb * 16;
    const int64_t j0 = static_cast<int64_t>(s_list.list_id[li]) * bs + off;
    const auto& kr = t.kr;
    const auto& vr = t.vr;
    const auto& ksc = t.ksc;
    const auto& vsc = t.vsc;

    float s[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
      for (int t = 0; t < kChunks; ++t) {
        const uint4 w = kv_words(kr[nt][t]);
        mma_m16n8k16<kHalfMma>(s[nt], q_frag[2 * t][lane], w.x, w.y);
        mma_m16n8k16<kHalfMma>(s[nt], q_frag[2 * t + 1][lane], w.z, w.w);
      }
    }

    if constexpr (per_token) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] *= ksc[(e & 1) + 2 * nt];
      }
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t j = j0 + nt * 8 + 2 * c + (e & 1);
        s[nt][e] = j <= pos ? s[nt][e] * (kE4m3F16 ? logit_scale : prm.scale_log2) : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
      }
    }
    float m_use[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xFFFFFFFFu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xFFFFFFFFu, mx[r], 2));
      const float m_new = fmaxf(m_run[r], mx[r]);
      m_use[r] = m_new == -INFINITY ? 0.0f : m_new;  // keeps exp2 arguments finite
      alpha[r] = exp2f(m_run[r] - m_use[r]);
      m_run[r] = m_new;
    }
    float rowsum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - m_use[e >> 1]);
        rowsum[e >> 1] += s[nt][e];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha[r] + rowsum[r];
    if constexpr (per_token) {
      // The probabilities carry their keys' V scales relative to 2^v_exp, the power of two just
      // above the largest V scale so far; when it grows, the accumulators move to the new one
      // (exactly, with alpha: both are scalings of the same sums). A subtile whose scales are
      // all zero keeps it: raising it to 2^0 would round the later probabilities of small
      // scales relative to 1, into f16's subnormals. Non-finite scales take 2^0.
      float vm = fmaxf(fmaxf(fabsf(vsc[0]), fabsf(vsc[1])), fmaxf(fabsf(vsc[2]), fabsf(vsc[3])));
      vm = fmaxf(vm, __shfl_xor_sync(0xFFFFFFFFu, vm, 1));
      vm = fmaxf(vm, __shfl_xor_sync(0xFFFFFFFFu, vm, 2));
      int e = 0;
      frexpf(vm, &e);
      const int v_new = max(v_exp, vm > 0.0f && vm < INFINITY ? e : vm == 0.0f ? v_exp : 0);
      const float shift = ldexpf(1.0f, v_exp - v_new);
      alpha[0] *= shift;
      alpha[1] *= shift;
      v_exp = v_new;
      const float rel = ldexpf(1.0f, -v_new);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e2 = 0; e2 < 4; ++e2) s[nt][e2] *= vsc[(e2 & 1) + 2 * nt] * rel;
      }
    }
    // A row whose running max did not grow has alpha exactly 1, a multiplication that changes
    // nothing: the rescale is skipped when that holds for every row of the warp.
    if (__any_sync(0xFFFFFFFFu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int n = 0; n < kOutTiles; ++n) {
        acc[n][0] *= alpha[0];
        acc[n][1] *= alpha[0];
        acc[n][2] *= alpha[1];
        acc[n][3] *= alpha[1];
      }
    }
    const uint4 pa =
        make_uint4(pack2<kHalfMma>(s[0][0], s[0][1]), pack2<kHalfMma>(s[0][2], s[0][3]),
                   pack2<kHalfMma>(s[1][0], s[1][1]), pack2<kHalfMma>(s[1][2], s[1][3]));
#pragma unroll
    for (int vh = 0; vh < kHalves; ++vh) {
      uint32_t vw[4][4];
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4) {
        const uint4 w = kv_words(vr[q4][vh]);
        vw[q4][0] = w.x;
        vw[q4][1] = w.y;
        vw[q4][2] = w.z;
        vw[q4][3] = w.w;
      }
#pragma unroll
      for (int nd = 0; nd < 8; ++nd) {
        const uint32_t sel = (nd & 1) ? 0x7632u : 0x5410u;
        const uint32_t b0 = __byte_perm(vw[0][nd >> 1], vw[1][nd >> 1], sel);
        const uint32_t b1 = __byte_perm(vw[2][nd >> 1], vw[3][nd >> 1], sel);
        mma_m16n8k16<kHalfMma>(acc[vh * 8 + nd], pa, b0, b1);
      }
    }
  };
  // Register double buffer: the next subtile's loads are in flight while the warp computes the
  // current one. Three forms, chosen by the launcher from same-call A/B timings
  // (bench/results/2026-11-30-attn-two-buffers-ab/, 2026-11-30-attn-e4m3-f16-ab/):
  //  * two buffers in turn (kTwoBuffers), no copy between them (the copy is ~65 register moves
  //    per subtile): up to 10% faster for 16-bit K/V with 4 rows per request. Its loop body is
  //    twice the code; in the in-cluster calls of small batches (about 2 subtiles per warp) it
  //    made the whole decode step ~1 us slower, though the attention op alone was not slower;
  //  * one buffer refilled from the next: the 16-bit in-cluster calls;
  //  * the same two subtiles ahead: e4m3 K/V (kE4m3F16), whose loop waits on its loads rather
  //    than its instructions (one subtile ahead it was up to 10% slower than the bf16 path it
  //    replaced; two ahead, 8K x 64 with 4 rows per request 51.2 -> 41.9 us; three ahead, 43.8;
  //    per-layer scales). Its subtile fragments take 32 registers (40 with per-token-head
  //    scales); a 16-bit one's 64 would not leave room for a second.
  int i = sub_begin + warp;
  int li = static_cast<int>(div_u32(static_cast<uint32_t>(i), static_cast<uint32_t>(spb)));
  int sb = i - li * spb;
  // One subtile: issues the loads of the warp's next subtile into `next`, then computes (li, sb)
  // from `cur`.
  auto step = [&](const Tile& cur, Tile& next) {
    int li2 = li, sb2 = sb;
    advance(li2, sb2, kAttnWarps);
    if (i + kAttnWarps < sub_end) load_tile(i + kAttnWarps, li2, sb2, next);
    process(li, sb, cur);
    i += kAttnWarps;
    li = li2;
    sb = sb2;
  };
  if constexpr (kTwoBuffers) {
    Tile ta, tb;
    if (i < sub_end) load_tile(i, li, sb, ta);
    while (i < sub_end) {
      step(ta, tb);
      if (i >= sub_end) break;
      step(tb, ta);
    }
  } else if constexpr (kE4m3F16) {
    Tile cur, next;
    int li1 = li, sb1 = sb;
    advance(li1, sb1, kAttnWarps);
    if (i < sub_end) load_tile(i, li, sb, cur);
    if (i + kAttnWarps < sub_end) load_tile(i + kAttnWarps, li1, sb1, next);
    scale_q();
    while (i < sub_end) {
      int li2 = li1, sb2 = sb1;
      advance(li2, sb2, kAttnWarps);
      Tile far;
      if (i + 2 * kAttnWarps < sub_end) load_tile(i + 2 * kAttnWarps, li2, sb2, far);
      process(li, sb, cur);
      cur = next;
      next = far;
      i += kAttnWarps;
      li = li1;
      sb = sb1;
      li1 = li2;
      sb1 = sb2;
    }
  } else {
    Tile cur;
    if (i < sub_end) load_tile(i, li, sb, cur);
    while (i < sub_end) {
      Tile next;
      step(cur, next);
      cur = next;
    }
  }

  // Merge the 4 warps' partial softmax states in fixed warp order.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] += __shfl_xor_sync(0xFFFFFFFFu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xFFFFFFFFu, l_run[r], 2);
  }
  if (c == 0) {
    s_m[warp][g] = m_run[0];
    s_m[warp][g + 8] = m_run[1];
    s_l[warp][g] = l_run[0];
    s_l[warp][g + 8] = l_run[1];
  }
  __syncthreads();
  float factor[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int hh = g + 8 * r;
    float m_all = -INFINITY;
    for (int w = 0; w < kAttnWarps; ++w) m_all = fmaxf(m_all, s_m[w][hh]);
    const float m_use = m_all == -INFINITY ? 0.0f : m_all;
    float l_all = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) l_all += s_l[w][hh] * exp2f(s_m[w][hh] - m_use);
    // kE4m3F16: the V scale (1 otherwise) applies here, once per output: the per-layer one, or
    // the per-token-head ones' 2^v_exp.
    const float v_out = !kE4m3F16 ? 1.0f : per_token ? ldexpf(1.0f, v_exp) : v_layer;
    factor[r] = l_all > 0.0f ? exp2f(m_run[r] - m_use) / l_all * v_out : 0.0f;
  }
#pragma unroll
  for (int n = 0; n < kOutTiles; ++n) {
    *reinterpret_cast<float2*>(&s_red[warp][g][8 * n + 2 * c]) =
        make_float2(acc[n][0] * factor[0], acc[n][1] * factor[0]);
    *reinterpret_cast<float2*>(&s_red[warp][g + 8][8 * n + 2 * c]) =
        make_float2(acc[n][2] * factor[1], acc[n][3] * factor[1]);
  }
  __syncthreads();

  // Thread t sums dim t % D of heads t / D, t / D + kHeadStep, ...: all its shared-memory reads
  // are independent and issued together, and a warp's global stores are contiguous.
  constexpr int kHeadStep = kAttnThreads / D;
  constexpr int kHeadsPerThread = kAttnHeads / kHeadStep;
  const int d = tid % D;
  const int col = 8 * ((d >> 6) * 8 + (d & 7)) + 2 * ((d >> 4) & 3) + ((d >> 3) & 1);
  float o[kHeadsPerThread];
#pragma unroll
  for (int k = 0; k < kHeadsPerThread; ++k) {
    const int hh = tid / D + k * kHeadStep;
    o[k] = ((s_red[0][hh][col] + s_red[1][hh][col]) + s_red[2][hh][col]) + s_red[3][hh][col];
  }
  if (tid < kAttnHeads) {
    const int hh = tid;
    float m_all = -INFINITY;
    for (int w = 0; w < kAttnWarps; ++w) m_all = fmaxf(m_all, s_m[w][hh]);
    const float m_use = m_all == -INFINITY ? 0.0f : m_all;
    float l_all = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) l_all += s_l[w][hh] * exp2f(s_m[w][hh] - m_use);
    s_lse[hh] = l_all > 0.0f ? m_all + log2f(l_all) : -INFINITY;
  }
  if (prm.splits == 1) {
    // s_lse[tid] was written by this thread.
#pragma unroll
    for (int k = 0; k < kHeadsPerThread; ++k) {
      const int hh = tid / D + k * kHeadStep;
      if (hh >= nh) break;
      store_from_float(prm.out, prm.out_dtype,
                       row * prm.out_stride_row + (head0 + hh) * prm.out_stride_head + d, o[k]);
    }
    if (tid < nh && prm.lse != nullptr) {
      prm.lse[row * prm.lse_stride_row + (head0 + tid) * prm.lse_stride_head] = s_lse[tid] * kLn2;
    }
    return;
  }

  if (!prm.cluster) {
    // The merge kernel combines the normalised partials and their log2-sum-exps. It is a
    // dependent launch that waits for them (wait_for_prior_grid), so it may start now. (Here,
    // not earlier or at the exit: a trigger at the CTA's start, after its main loop or at its
    // exit made merge-kernel calls 0.3-3 us slower, bench/results/2026-12-01-attn-merge-trigger/.)
    allow_dependent_launch();
    const int64_t T = prm.rows.num_rows;
#pragma unroll
    for (int k = 0; k < kHeadsPerThread; ++k) {
      const int hh = tid / D + k * kHeadStep;
      if (hh >= nh) break;
      prm.part_out[((split * T + row) * prm.num_q_heads + head0 + hh) * D + d] = o[k];
    }
    if (tid < nh) prm.part_lse[(split * T + row) * prm.num_q_heads + head0 + tid] = s_lse[tid];
    return;
  }

  // In-cluster merge: the splits of a (row, head chunk) are one thread-block cluster (grid.z =
  // cluster z = splits). Each CTA leaves its normalised partial (in s_red[0], free once every
  // thread has read its sums) and log2-sum-exps in shared memory; after the cluster barrier,
  // split r combines heads r, r + splits, ... from all splits in ascending split order, with the
  // merge kernel's arithmetic (so both give the same bits for the same splits).
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kHeadsPerThread; ++k) s_red[0][tid / D + k * kHeadStep][d] = o[k];
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int splits = prm.splits;
  constexpr int kMaxSplits = static_cast<int>(detail::kAttnMaxClusterSplits);
  for (int hh = split + (tid / D) * splits; hh < nh; hh += kHeadStep * splits) {
    // Every split's values are loaded before any is used (split index clamped; see "Issuing
    // loads" in common.cuh), so the combine costs one distributed-shared-memory round trip.
    float part_lse[kMaxSplits], part_o[kMaxSplits];
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) {
      const unsigned src = static_cast<unsigned>(min(s, splits - 1));
      part_lse[s] = cluster.map_shared_rank(&s_lse[0], src)[hh];
      part_o[s] = cluster.map_shared_rank(&s_red[0][0][0], src)[hh * (D + 8) + d];
    }
    float m_all = -INFINITY;
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) {
      if (s < splits) m_all = fmaxf(m_all, part_lse[s]);
    }
    float out = 0.0f, lse = -INFINITY;
    if (m_all != -INFINITY) {
      float w_sum = 0.0f;
#pragma unroll
      for (int s = 0; s < kMaxSplits; ++s) {
        if (s < splits) {
          const float w = exp2f(part_lse[s] - m_all);
          w_sum += w;
          out += w * part_o[s];
        }
      }
      out /= w_sum;
      lse = (m_all + log2f(w_sum)) * kLn2;
    }
    store_from_float(prm.out, prm.out_dtype,
                     row * prm.out_stride_row + (head0 + hh) * prm.out_stride_head + d, out);
    if (d == 0 && prm.lse != nullptr) {
      prm.lse[row * prm.lse_stride_row + (head0 + hh) * prm.lse_stride_head] = lse;
    }
  }
  // No CTA may exit while another still reads its shared memory. Those reads have completed
  // (their values went into this thread's output stores above), so the arrive needs no release
  // fence, and a relaxed one does not wait for the output stores to be performed (A/B: 0.1-0.3 us
  // less at batch 1).
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

// ---- One block per CTA (16-bit or e4m3 K/V, head dim 128, 128-key blocks) ----
//
// The split-K form of small decode batches where every split is one selected block: a CTA of
// 8 warps takes entry `split` of the row's list and issues all of the block's K and V (64 KB of
// bf16) as 16-byte asynchronous copies into shared memory at once, 16 per thread (e4m3: 8-byte
// register loads, converted on their way to shared memory), so each warp has 8 KB in flight (a
// warp drains about 4 KB per microsecond after a round trip,
// bench/results/2026-11-30-attn-wide-ctas-ab/; 4-warp CTAs of two 16-key subtiles per warp,
// loaded into registers, had 16 KB per warp). QK^T is split by keys (warp w: keys 16w..16w+15),
// one softmax over the block's 128 keys (row maxima and sums cross the warps through shared
// memory), and P.V by output dims (warp w: dims 16w..16w+15), so no warp's outputs need merging
// with another's. Operands go to the MMAs with ldmatrix from shared memory whose rows are
// 16-byte chunks XOR-swizzled by row (conflict-free ldmatrix of 8 rows of one chunk column).
// The partials go to the merge kernel. bench/results/2026-12-01-attn-block-ctas/ has the
// design's origin (the incumbent's split-K decode written in Triton ran 2-3 us faster at
// batch 1-16 than the 4-warp kernel in the same harness) and the timings.
constexpr int kBlockThreads = 256;
constexpr int kBlockWarps = kBlockThreads / 32;
constexpr int kBlockKeys = 128;
constexpr int kBlockDim = 128;
// Dynamic shared memory: K and V [128 keys][128 dims], Q and P [16 heads][128], 16-bit.
constexpr int kBlockSmemBytes = (2 * kBlockKeys + 2 * kAttnHeads) * kBlockDim * 2;

// Element offset of (row, chunk of 8 elements) in a [rows][128] 16-bit tile of 16 chunks a row.
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * kBlockDim + ((chunk ^ (row & 7)) << 3);
}

// Eight Q elements of type QT from global memory, raw (converted by q8_floats after the batch of
// prologue loads).
template <typename QT>
struct Q8 {
  uint4 w[sizeof(QT) == 4 ? 2 : 1];
};
template <typename QT>
__device__ __forceinline__ Q8<QT> q8_load(const QT* p) {
  Q8<QT> q;
#pragma unroll
  for (int i = 0; i < (sizeof(QT) == 4 ? 2 : 1); ++i) q.w[i] = ld_raw_v4(p + i * (16 / sizeof(QT)));
  return q;
}
template <typename QT>
__device__ __forceinline__ void q8_floats(const Q8<QT>& q, float (&f)[8]) {
  if constexpr (sizeof(QT) == 4) {
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = __uint_as_float((&q.w[i / 4].x)[i % 4]);
  } else {
    const QT* e = reinterpret_cast<const QT*>(&q.w[0]);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = to_float(e[i]);
  }
}
template <bool kHalfMma>
__device__ __forceinline__ uint4 pack8(const float (&f)[8], float mul) {
  return make_uint4(
      pack2<kHalfMma>(f[0] * mul, f[1] * mul), pack2<kHalfMma>(f[2] * mul, f[3] * mul),
      pack2<kHalfMma>(f[4] * mul, f[5] * mul), pack2<kHalfMma>(f[6] * mul, f[7] * mul));
}

// One CTA per (row, KV head x 16-head chunk, list entry); grid.z = prm.splits = topk width.
// e4m3 K/V go through registers, where they become exact f16, into the same shared-memory tiles,
// and the MMAs run in f16 with Q prescaled by a power of two and the scales applied to fp32
// values, as in sparse_attention_kernel's kE4m3F16 path: a per-layer K scale to the logits and V
// scale to the outputs; per-token-head ones (kTokenScales) to each key's logits and
// probabilities, the latter relative to 2^v_exp, the power of two just above the block's largest
// V scale (so the f16 probabilities stay in f16's normal range), which the outputs take back.
template <typename CacheT, bool kTokenScales = false>
__global__ void __launch_bounds__(kBlockThreads, 2)
    sparse_attention_block_kernel(const SparseAttnParams prm) {
  constexpr bool kE4m3 = std::is_same_v<CacheT, uint8_t>;
  static_assert(kE4m3 || !kTokenScales, "only e4m3 caches have scales");
  constexpr bool kHalfMma = KvTraits<CacheT>::kHalfMma;
  constexpr int D = kBlockDim;
  extern __shared__ __align__(16) uint16_t blk_smem[];
  uint16_t* const sK = blk_smem;
  uint16_t* const sV = sK + kBlockKeys * D;
  uint16_t* const sQ = sV + kBlockKeys * D;
  uint16_t* const sP = sQ + kAttnHeads * D;
  __shared__ AttnList s_list;
  __shared__ float s_mx[kBlockWarps][kAttnHeads];
  __shared__ float s_sum[kBlockWarps][kAttnHeads];
  __shared__ float s_qmax[kBlockWarps];  // kE4m3: each warp's largest |q|
  __shared__ float s_vmax[kBlockWarps];  // kTokenScales: each warp's largest |V scale|

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const AttnCta cta = attn_cta(prm);
  const int64_t row = cta.row;
  const int kvh = cta.kvh, hc = cta.hc, split = cta.split, head0 = cta.head0, nh = cta.nh;
  const int W = prm.topk_width;

  // The independent loads first (top-k entry, sequence length, Q), then their uses: one round
  // trip, then the block table's, then the block's ("Issuing loads" in common.cuh).
  const int64_t req =
      div_u32(static_cast<uint32_t>(row), static_cast<uint32_t>(prm.rows.query_len));
  const uint32_t early_seq_len = ld_decode_seq_len_of(prm.rows, req);
  int32_t tk[1];
  tk[0] = __ldg(prm.topk + kvh * prm.tk_stride_head + row * prm.tk_stride_row +
                min(tid, W - 1) * prm.tk_stride_col);
  // Thread t holds Q head t / 16 (the chunk's last head past the group), dims 8 (t % 16) + [0, 8).
  const int q_head = tid >> 4, q_chunk = tid & 15;
  const int64_t q_off =
      row * prm.q_stride_row + (head0 + min(q_head, nh - 1)) * prm.q_stride_head + 8 * q_chunk;
  float k_layer = 1.0f, v_layer = 1.0f;  // 16-bit caches have no scales
  if constexpr (kE4m3) {
    if (prm.scale_mode == KvScaleMode::kPerLayer) {
      k_layer = __ldg(prm.k_scale);
      v_layer = __ldg(prm.v_scale);
    }
  }
  float qf[8];
  switch (prm.q_dtype) {
    case DType::kBF16:
      q8_floats(q8_load(static_cast<const __nv_bfloat16*>(prm.q) + q_off), qf);
      break;
    case DType::kF16:
      q8_floats(q8_load(static_cast<const __half*>(prm.q) + q_off), qf);
      break;
    default:
      q8_floats(q8_load(static_cast<const float*>(prm.q) + q_off), qf);
      break;
  }
  if constexpr (kE4m3) {
    if (q_head >= nh) {
#pragma unroll
      for (int i = 0; i < 8; ++i) qf[i] = 0.0f;
    }
    // Q's scale needs the CTA's largest |q| (stored once the list barrier has passed).
    float mx = 0.0f;  // fmaxf drops NaNs
#pragma unroll
    for (int i = 0; i < 8; ++i) mx = fmaxf(mx, fabsf(qf[i]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
    if (lane == 0) s_qmax[warp] = mx;
  } else {
    const uint4 qw = q_head < nh ? pack8<kHalfMma>(qf, 1.0f) : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(sQ + swz(q_head, q_chunk)) = qw;
  }

  int32_t* flags = (split == 0 && hc == 0) ? prm.error_flags : nullptr;
  const AttnRow ar = attn_row(prm, cta, flags, early_seq_len, req, kBlockKeys);
  const RowInfo& info = ar.info;
  const int64_t pos = ar.pos, own = ar.own;
  const bool live = ar.live;
  build_attn_list<kBlockThreads>(prm, tk, live, own, info.req, flags, s_list);
  __syncthreads();
  float logit_scale = prm.scale_log2;
  if constexpr (kE4m3) {
    // The logit scale takes 2^-q_exp back.
    const int q_exp = q_scale_exp(s_qmax);
    *reinterpret_cast<uint4*>(sQ + swz(q_head, q_chunk)) = pack8<true>(qf, ldexpf(1.0f, q_exp));
    logit_scale = prm.scale_log2 * k_layer * ldexpf(1.0f, -q_exp);
  }

  // This CTA's block: keys [0, n_keys) of list entry `split` are visible (the own block, always
  // the list's last, up to the position). Rows from n_keys on are zero-filled, not loaded: a key
  // past the position may hold anything, NaN included, and its V row enters P.V with P = 0.
  const int n_sel = s_list.nsel;
  int n_keys = 0;
  int64_t page = 0;
  if (split < n_sel) {
    page = s_list.list_page[split];
    n_keys =
        s_list.list_id[split] == own ? static_cast<int>(pos - own * kBlockKeys) + 1 : kBlockKeys;
  }
  // kTokenScales: the K and V scales of the keys of this lane's logits, 16 warp + 8 (i / 2) +
  // 2c + i % 2, issued with the block's loads. Keys past the position take 0 (their scale slots
  // may hold anything; their probabilities are 0).
  float ksc[4], vsc[4];
  if constexpr (kTokenScales) {
    const int64_t slot0 = page * kBlockKeys;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int key = 16 * warp + 8 * (i >> 1) + 2 * c + (i & 1);
      ksc[i] = vsc[i] = 0.0f;
      if (key < n_keys) {
        ksc[i] = scale_at(prm.k_scale, prm.ks_stride_head, prm.ks_stride_slot, kvh, slot0 + key);
        vsc[i] = scale_at(prm.v_scale, prm.vs_stride_head, prm.vs_stride_slot, kvh, slot0 + key);
      }
    }
  }
  uint2 v_raw[kBlockKeys / 16];  // kE4m3: V's 8-element runs, converted to f16 after QK^T
  if (n_keys > 0) {
    const CacheT* kb =
        static_cast<const CacheT*>(prm.k) + kvh * prm.k_stride_head + page * prm.k_stride_page;
    const CacheT* vb =
        static_cast<const CacheT*>(prm.v) + kvh * prm.v_stride_head + page * prm.v_stride_page;
    const int k_tok = static_cast<int>(prm.k_stride_tok);
    const int v_tok = static_cast<int>(prm.v_stride_tok);
    // Thread t copies chunk t % 16 of keys t / 16 + 16 i: a warp's copies are 2 whole rows.
    if constexpr (kE4m3) {
      uint2 k_raw[kBlockKeys / 16];
#pragma unroll
      for (int i = 0; i < kBlockKeys / 16; ++i) {
        const int key = (tid >> 4) + 16 * i;
        k_raw[i] = v_raw[i] = make_uint2(0, 0);
        if (key < n_keys) {
          k_raw[i] = ld_raw_v2(kb + key * k_tok + 8 * q_chunk);
          v_raw[i] = ld_raw_v2(vb + key * v_tok + 8 * q_chunk);
        }
      }
#pragma unroll
      for (int i = 0; i < kBlockKeys / 16; ++i) {
        *reinterpret_cast<uint4*>(sK + swz((tid >> 4) + 16 * i, q_chunk)) = kv_words(k_raw[i]);
      }
    } else {
      // K, then V, as one commit group each.
      auto copy_tile = [&](uint16_t* dst, const CacheT* base, int tok) {
#pragma unroll
        for (int i = 0; i < kBlockKeys / 16; ++i) {
          const int key = (tid >> 4) + 16 * i;
          cp_async_16(dst + swz(key, q_chunk), base + key * tok + 8 * q_chunk, key < n_keys);
        }
        cp_async_commit();
      };
      copy_tile(sK, kb, k_tok);
      copy_tile(sV, vb, v_tok);
      cp_async_wait<1>();  // K
    }
  }
  __syncthreads();  // K (and Q) in shared memory

  // S = Q K^T for keys 16 warp + [0, 16): rows g and g + 8, keys 8 nt + 2c + {0, 1}.
  float s[2][4];
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
  }
  const int mi = lane >> 3, mr = lane & 7;
  if (n_keys > 0) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t a[4], b[4];
      ldmatrix_x4(a, sQ + swz((mi & 1) * 8 + mr, 2 * ks + (mi >> 1)));
      ldmatrix_x4(b, sK + swz(16 * warp + (mi >> 1) * 8 + mr, 2 * ks + (mi & 1)));
      const uint4 av = make_uint4(a[0], a[1], a[2], a[3]);
      mma_m16n8k16<kHalfMma>(s[0], av, b[0], b[1]);
      mma_m16n8k16<kHalfMma>(s[1], av, b[2], b[3]);
    }
  }
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = 16 * warp + 8 * nt + 2 * c + (e & 1);
      if constexpr (kTokenScales) s[nt][e] *= ksc[2 * nt + (e & 1)];
      s[nt][e] = key < n_keys ? s[nt][e] * logit_scale : -INFINITY;
      mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xFFFFFFFFu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xFFFFFFFFu, mx[r], 2));
    if (c == 0) s_mx[warp][g + 8 * r] = mx[r];
  }
  if constexpr (kTokenScales) {
    float vm = fmaxf(fmaxf(fabsf(vsc[0]), fabsf(vsc[1])), fmaxf(fabsf(vsc[2]), fabsf(vsc[3])));
    vm = fmaxf(vm, __shfl_xor_sync(0xFFFFFFFFu, vm, 1));
    vm = fmaxf(vm, __shfl_xor_sync(0xFFFFFFFFu, vm, 2));
    if (lane == 0) s_vmax[warp] = vm;
  }
  __syncthreads();
  // kTokenScales: v_exp as sparse_attention_kernel's after one subtile of the block's largest V
  // scale: its exponent, at least -126; -126 for all-zero scales; 0 for non-finite ones.
  int v_exp = 0;
  if constexpr (kTokenScales) {
    const float vm = max_over_warps(s_vmax);
    int e = 0;
    frexpf(vm, &e);
    v_exp = vm > 0.0f && vm < INFINITY ? max(e, -126) : vm == 0.0f ? -126 : 0;
  }
  const float v_rel = kTokenScales ? ldexpf(1.0f, -v_exp) : 1.0f;
  float m_use[2], m_all[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    m_all[r] = s_mx[0][g + 8 * r];
#pragma unroll
    for (int w = 1; w < kBlockWarps; ++w) m_all[r] = fmaxf(m_all[r], s_mx[w][g + 8 * r]);
    m_use[r] = m_all[r] == -INFINITY ? 0.0f : m_all[r];  // keeps exp2 arguments finite
  }
  float rowsum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[nt][e] = exp2f(s[nt][e] - m_use[e >> 1]);
      rowsum[e >> 1] += s[nt][e];
    }
    if constexpr (kTokenScales) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] *= vsc[2 * nt + (e & 1)] * v_rel;
    }
    const int key = 16 * warp + 8 * nt + 2 * c;
    *reinterpret_cast<uint32_t*>(sP + swz(g, key >> 3) + (key & 7)) =
        pack2<kHalfMma>(s[nt][0], s[nt][1]);
    *reinterpret_cast<uint32_t*>(sP + swz(g + 8, key >> 3) + (key & 7)) =
        pack2<kHalfMma>(s[nt][2], s[nt][3]);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    rowsum[r] += __shfl_xor_sync(0xFFFFFFFFu, rowsum[r], 1);
    rowsum[r] += __shfl_xor_sync(0xFFFFFFFFu, rowsum[r], 2);
    if (c == 0) s_sum[warp][g + 8 * r] = rowsum[r];
  }
  if constexpr (kE4m3) {
    if (n_keys > 0) {
#pragma unroll
      for (int i = 0; i < kBlockKeys / 16; ++i) {
        *reinterpret_cast<uint4*>(sV + swz((tid >> 4) + 16 * i, q_chunk)) = kv_words(v_raw[i]);
      }
    }
  } else {
    cp_async_wait<0>();  // V
  }
  __syncthreads();  // P, the row sums and V

  // O = P V for dims 16 warp + [0, 16): rows g and g + 8, dims 8 nt + 2c + {0, 1}.
  float acc[2][4];
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
  }
  if (n_keys > 0) {
#pragma unroll
    for (int ks = 0; ks < kBlockKeys / 16; ++ks) {
      uint32_t a[4], b[4];
      ldmatrix_x4(a, sP + swz((mi & 1) * 8 + mr, 2 * ks + (mi >> 1)));
      ldmatrix_x4_trans(b, sV + swz(16 * ks + (mi & 1) * 8 + mr, 2 * warp + (mi >> 1)));
      const uint4 av = make_uint4(a[0], a[1], a[2], a[3]);
      mma_m16n8k16<kHalfMma>(acc[0], av, b[0], b[1]);
      mma_m16n8k16<kHalfMma>(acc[1], av, b[2], b[3]);
    }
  }
  float factor[2], lse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l_all = 0.0f;
#pragma unroll
    for (int w = 0; w < kBlockWarps; ++w) l_all += s_sum[w][g + 8 * r];
    // kE4m3: the V scale (1 without one) applies here, once per output.
    const float v_out = kTokenScales ? ldexpf(1.0f, v_exp) : v_layer;
    factor[r] = l_all > 0.0f ? (kE4m3 ? v_out / l_all : 1.0f / l_all) : 0.0f;
    lse[r] = l_all > 0.0f ? m_all[r] + log2f(l_all) : -INFINITY;
  }

  // The merge kernel combines the normalised partials and their log2-sum-exps (it waits for
  // them, wait_for_prior_grid).
  allow_dependent_launch();
  const int64_t T = prm.rows.num_rows;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int hh = g + 8 * r;
    if (hh >= nh) continue;
    float* po = prm.part_out + ((split * T + row) * prm.num_q_heads + head0 + hh) * D;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      *reinterpret_cast<float2*>(po + 16 * warp + 8 * nt + 2 * c) =
          make_float2(acc[nt][2 * r] * factor[r], acc[nt][2 * r + 1] * factor[r]);
    }
    if (warp == 0 && c == 0)
      prm.part_lse[(split * T + row) * prm.num_q_heads + head0 + hh] = lse[r];
  }
}

// The merge kernel's arguments: only what it reads, in a few cache lines, where SparseAttnParams
// spreads them over several hundred bytes. A kernel's parameters are read through the constant
// cache, which is cold at its start; in the merge kernel those misses were 13% of the warp
// samples at 8K x 16 (bench/results/2026-12-01-prologue-loads/call-profile.sh).
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
// cost 0.6-0.9 us more at batch 4-16, bench/results/2026-12-01-attn-merge-registers/.)
template <int kPrefetch>
__global__ void sparse_attention_merge_kernel(const AttnMergeParams prm) {
  const int64_t row = blockIdx.x;
  const int64_t head = blockIdx.y;
  const int d = threadIdx.x;
  const int64_t T = prm.num_rows;
  const int64_t hq = prm.num_q_heads;
  const int splits = prm.splits;
  const int64_t head_dim = prm.head_dim;
  const float* po = prm.part_out + (row * hq + head) * head_dim + d;
  const float* pl = prm.part_lse + row * hq + head;
  const int64_t split_stride = T * hq * head_dim;
  wait_for_prior_grid();  // the partials come from the attention kernel
  float pre_o[kPrefetch], pre_lse[kPrefetch];
#pragma unroll
  for (int s = 0; s < kPrefetch; ++s) {
    const int64_t sc = min(s, splits - 1);
    pre_o[s] = po[sc * split_stride];
    pre_lse[s] = pl[sc * T * hq];
  }
  float m_all = -INFINITY;
#pragma unroll
  for (int s = 0; s < kPrefetch; ++s) m_all = s < splits ? fmaxf(m_all, pre_lse[s]) : m_all;
  for (int s = kPrefetch; s < splits; ++s) m_all = fmaxf(m_all, pl[s * T * hq]);
  const float m_use = m_all == -INFINITY ? 0.0f : m_all;
  float w_sum = 0.0f, acc_o = 0.0f;
#pragma unroll
  for (int s = 0; s < kPrefetch; ++s) {
    combine_step(s < splits, pre_lse[s], pre_o[s], m_use, w_sum, acc_o);
  }
#pragma unroll 16
  for (int s = kPrefetch; s < splits; ++s) {
    combine_step(true, pl[s * T * hq], po[s * split_stride], m_use, w_sum, acc_o);
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

}  // namespace cuda
}  // namespace msa
