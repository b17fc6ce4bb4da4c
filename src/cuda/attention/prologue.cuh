// The prologue shared by the sparse attention kernels: the CTA's place in the grid, its row
// resolved, Q loaded, and the row's top-k selection validated into an ascending list.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/attention/params.cuh"
#include "cuda/row_map.cuh"

namespace msa {
namespace cuda {

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

// load_q_items of Q's dtype (bf16, f16 or f32).
template <int kQItems>
__device__ __forceinline__ void load_q(const SparseAttnParams& prm, int64_t row, int head0, int nh,
                                       int tid, float (&qv)[kQItems][2][4]) {
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
}

// The row's top-k ids as build_attn_list takes them: entry e by thread e % kThreads, as
// tk[e / kThreads]. In bounds for every row < T (topk is [Hkv, >= T, W]); padding rows ignore the
// values, and entries e >= W (clamped here) are ignored where they are used. kInLaunch: the ids
// were written earlier in this launch, which the non-coherent read-only path may not see.
template <int kThreads, bool kInLaunch = false, int kTkPer>
__device__ __forceinline__ void load_topk_ids(const SparseAttnParams& prm, int kvh, int64_t row,
                                              int tid, int32_t (&tk)[kTkPer]) {
  const int W = prm.topk_width;  // >= 1 (validated)
#pragma unroll
  for (int r = 0; r < kTkPer; ++r) {
    const int32_t* p = prm.topk + kvh * prm.tk_stride_head + row * prm.tk_stride_row +
                       min(tid + r * kThreads, W - 1) * prm.tk_stride_col;
    tk[r] = kInLaunch ? __ldcg(p) : __ldg(p);
  }
}

// The largest of x over the warp (fmaxf: NaNs drop out).
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, o));
  return x;
}

// The (row, KV head, head chunk, split) of an attention CTA (grid x, y = KV head x head chunk,
// z), and its q heads: head0 .. head0 + nh - 1.
struct AttnCta {
  int64_t row;
  int kvh, hc, split, head0, nh;
};
// attn_cta_at: the same for the work item at (row, KV head x head chunk y, split), which a
// persistent kernel's CTA takes in turn.
__device__ __forceinline__ AttnCta attn_cta_at(const SparseAttnParams& prm, int64_t row, uint32_t y,
                                               int split) {
  AttnCta a;
  a.row = row;
  a.kvh = static_cast<int>(div_u32(y, static_cast<uint32_t>(prm.head_chunks)));
  a.hc = static_cast<int>(y) - a.kvh * prm.head_chunks;
  a.split = split;
  a.head0 = a.kvh * prm.group + a.hc * kAttnHeads;
  a.nh = min(kAttnHeads, prm.group - a.hc * kAttnHeads);
  return a;
}
__device__ __forceinline__ AttnCta attn_cta(const SparseAttnParams& prm) {
  return attn_cta_at(prm, blockIdx.x, blockIdx.y, static_cast<int>(blockIdx.z));
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

}  // namespace cuda
}  // namespace msa
