// sparse_attention_block_kernel: one selected block per CTA (16-bit or e4m3 K/V, head dim 128,
// 128-key blocks), copied whole into shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/attention/params.cuh"
#include "cuda/attention/prologue.cuh"
#include "cuda/attention/softmax.cuh"
#include "cuda/common.cuh"
#include "cuda/mma.cuh"

namespace msa {
namespace cuda {

// The split-K form of small decode batches where every split is one selected block: a CTA of
// 8 warps takes entry `split` of the row's list and issues all of the block's K and V (64 KB of
// bf16) as 16-byte asynchronous copies into shared memory at once, 16 per thread (e4m3: 8-byte
// register loads, converted on their way to shared memory), so each warp has 8 KB in flight: a
// warp's bytes arrive slowly after a round trip, so many warps with moderate amounts in flight
// pull a block faster than the 4-warp kernel's (bench/EXPERIMENTS.md:
// 2026-11-30-attn-wide-ctas-ab). QK^T is split by keys (warp w: keys 16w..16w+15),
// one softmax over the block's 128 keys (row maxima and sums cross the warps through shared
// memory), and P.V by output dims (warp w: dims 16w..16w+15), so no warp's outputs need merging
// with another's. Operands go to the MMAs with ldmatrix from shared memory whose rows are
// 16-byte chunks XOR-swizzled by row (conflict-free ldmatrix of 8 rows of one chunk column).
// The partials go to the merge kernel. The design follows the incumbent's split-K decode, which
// was faster at batch 1-16 than the 4-warp kernel in the same harness (bench/EXPERIMENTS.md:
// 2026-12-01-attn-block-ctas).
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

// Per-token-head scales: the K and V scales of the keys of this lane's logits, 16 warp + 8 (i /
// 2) + 2c + i % 2, issued with the block's loads. Keys past the position take 0 (their scale
// slots may hold anything; their probabilities are 0).
__device__ __forceinline__ void load_block_token_scales(const SparseAttnParams& prm, const int& kvh,
                                                        const int64_t& page, const int& n_keys,
                                                        const int& warp, const int& c,
                                                        float (&ksc)[4], float (&vsc)[4]) {
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

// Issues the copies of the block's K and V (keys [0, n_keys); the rest are zero-filled): thread t
// copies chunk t % 16 of keys t / 16 + 16 i, so a warp's copies are 2 whole rows. 16-bit K/V go
// to shared memory by cp.async, K then V as one commit group each, and the call returns once K
// has arrived; e4m3 K/V are loaded into registers (k_raw, v_raw), K converted to f16 into sK,
// V kept in v_raw until after QK^T.
template <typename CacheT>
__device__ __forceinline__ void copy_block_kv(const SparseAttnParams& prm, const int& kvh,
                                              const int64_t& page, const int& n_keys,
                                              const int& tid, const int& q_chunk, uint16_t* sK,
                                              uint16_t* sV, uint2 (&k_raw)[kBlockKeys / 16],
                                              uint2 (&v_raw)[kBlockKeys / 16]) {
  const CacheT* kb =
      static_cast<const CacheT*>(prm.k) + kvh * prm.k_stride_head + page * prm.k_stride_page;
  const CacheT* vb =
      static_cast<const CacheT*>(prm.v) + kvh * prm.v_stride_head + page * prm.v_stride_page;
  const int k_tok = static_cast<int>(prm.k_stride_tok);
  const int v_tok = static_cast<int>(prm.v_stride_tok);
  if constexpr (std::is_same_v<CacheT, uint8_t>) {
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

// The logits of keys 16 warp + 8 nt + 2c + {0, 1} (rows g, g + 8 in s[nt]): scaled, times their
// K scales (kTokenScales), -inf past n_keys; each row's maximum over the warp's keys goes to
// s_mx, and with per-token-head scales the warp's largest |V scale| to s_vmax.
template <bool kTokenScales>
__device__ __forceinline__ void block_row_maxima(
    float (&s)[2][4], const float (&ksc)[4], const float (&vsc)[4], const float& logit_scale,
    const int& n_keys, const int& warp, const int& lane, const int& g, const int& c, float (&mx)[2],
    float (&s_mx)[kBlockWarps][kAttnHeads], float (&s_vmax)[kBlockWarps]) {
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
    mx[r] = quad_max(mx[r]);
    if (c == 0) s_mx[warp][g + 8 * r] = mx[r];
  }
  if constexpr (kTokenScales) {
    float vm = fmaxf(fmaxf(fabsf(vsc[0]), fabsf(vsc[1])), fmaxf(fabsf(vsc[2]), fabsf(vsc[3])));
    vm = quad_max(vm);
    if (lane == 0) s_vmax[warp] = vm;
  }
}

// Per-token-head scales: v_exp as sparse_attention_kernel's after one subtile of the block's
// largest V scale (the warps' s_vmax): its exponent, at least -126; -126 for all-zero scales; 0
// for non-finite ones.
__device__ __forceinline__ int block_v_exp(const float (&s_vmax)[kBlockWarps]) {
  const float vm = max_over_warps(s_vmax);
  int e = 0;
  frexpf(vm, &e);
  return vm > 0.0f && vm < INFINITY ? max(e, -126) : vm == 0.0f ? -126 : 0;
}

// The block's softmax (one for all its keys): each row's maximum m_all over the warps' s_mx, the
// probabilities P = 2^(s - m_all) (times their V scales relative to 2^v_exp, v_rel = 2^-v_exp)
// rounded to the MMA type into sP, and each warp's row sums into s_sum.
template <bool kHalfMma, bool kTokenScales>
__device__ __forceinline__ void block_probabilities(
    float (&s)[2][4], const float (&vsc)[4], const float& v_rel, const int& warp, const int& g,
    const int& c, const float (&s_mx)[kBlockWarps][kAttnHeads], float (&m_use)[2],
    float (&m_all)[2], float (&rowsum)[2], uint16_t* sP, float (&s_sum)[kBlockWarps][kAttnHeads]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    m_all[r] = s_mx[0][g + 8 * r];
#pragma unroll
    for (int w = 1; w < kBlockWarps; ++w) m_all[r] = fmaxf(m_all[r], s_mx[w][g + 8 * r]);
    m_use[r] = exp2_base(m_all[r]);
  }
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
    rowsum[r] = quad_sum(rowsum[r]);
    if (c == 0) s_sum[warp][g + 8 * r] = rowsum[r];
  }
}

// The merge kernel combines the normalised partials and their log2-sum-exps (it waits for them,
// wait_for_prior_grid): this warp's dims 16 warp + 8 nt + 2c + {0, 1} of heads g, g + 8 of the
// chunk, scaled by factor, and their LSEs (log2).
__device__ __forceinline__ void store_block_partials(
    const SparseAttnParams& prm, const int64_t& row, const int& head0, const int& nh,
    const int& split, const int& warp, const int& g, const int& c, const float (&acc)[2][4],
    const float (&factor)[2], const float (&lse)[2]) {
  const int64_t T = prm.rows.num_rows;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int hh = g + 8 * r;
    if (hh >= nh) continue;
    float* po = prm.part_out + ((split * T + row) * prm.num_q_heads + head0 + hh) * kBlockDim;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      *reinterpret_cast<float2*>(po + 16 * warp + 8 * nt + 2 * c) =
          make_float2(acc[nt][2 * r] * factor[r], acc[nt][2 * r + 1] * factor[r]);
    }
    if (warp == 0 && c == 0)
      prm.part_lse[(split * T + row) * prm.num_q_heads + head0 + hh] = lse[r];
  }
}

// One CTA per (row, KV head x 16-head chunk, list entry); grid.z = prm.splits = topk width.
// e4m3 K/V go through registers, where they become exact f16, into the same shared-memory tiles,
// and the MMAs run in f16 with Q prescaled by a power of two and the scales applied to fp32
// values, as in sparse_attention_kernel's kE4m3F16 path: a per-layer K scale to the logits and V
// scale to the outputs; per-token-head ones (kTokenScales) to each key's logits and
// probabilities, the latter relative to 2^v_exp, the power of two just above the block's largest
// V scale (so the f16 probabilities stay in f16's normal range), which the outputs take back.
// Its steps take the kernel's values by reference, as warp_kernel.cuh's do (and for the same
// reason); Q's load and the two MMA loops stay in the kernel, whose temporaries (Q8, ldmatrix
// words) compiled to other machine code when declared inside functions.
// attend_block is one such CTA's work, cta its coordinates, blk_smem its kBlockSmemBytes of
// dynamic shared memory. kTopkInLaunch: the top-k ids were written earlier in the same launch
// (the persistent decode step), so they are read through L2 rather than the non-coherent cache.
template <typename CacheT, bool kTokenScales = false, bool kTopkInLaunch = false>
__device__ __forceinline__ void attend_block(const SparseAttnParams& prm, const AttnCta& cta,
                                             uint16_t* blk_smem) {
  constexpr bool kE4m3 = std::is_same_v<CacheT, uint8_t>;
  static_assert(kE4m3 || !kTokenScales, "only e4m3 caches have scales");
  constexpr bool kHalfMma = KvTraits<CacheT>::kHalfMma;
  constexpr int D = kBlockDim;
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
  const int64_t row = cta.row;
  const int kvh = cta.kvh, hc = cta.hc, split = cta.split, head0 = cta.head0, nh = cta.nh;

  // The independent loads first (top-k entry, sequence length, Q), then their uses: one round
  // trip, then the block table's, then the block's ("Issuing loads" in common.cuh).
  const int64_t req =
      div_u32(static_cast<uint32_t>(row), static_cast<uint32_t>(prm.rows.query_len));
  const uint32_t early_seq_len = ld_decode_seq_len_of(prm.rows, req);
  int32_t tk[1];
  load_topk_ids<kBlockThreads, kTopkInLaunch>(prm, kvh, row, tid, tk);
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
    mx = warp_max(mx);
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
  float ksc[4], vsc[4];
  if constexpr (kTokenScales) load_block_token_scales(prm, kvh, page, n_keys, warp, c, ksc, vsc);
  uint2 v_raw[kBlockKeys / 16];  // kE4m3: V's 8-element runs, converted to f16 after QK^T
  uint2 k_raw[kBlockKeys / 16];
  if (n_keys > 0) copy_block_kv<CacheT>(prm, kvh, page, n_keys, tid, q_chunk, sK, sV, k_raw, v_raw);
  __syncthreads();  // K (and Q) in shared memory

  // S = Q K^T for keys 16 warp + [0, 16): rows g and g + 8, keys 8 nt + 2c + {0, 1}.
  float s[2][4];
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
  }
  const int mi = lane >> 3, mr = lane & 7;  // this lane's ldmatrix matrix and row
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
  block_row_maxima<kTokenScales>(s, ksc, vsc, logit_scale, n_keys, warp, lane, g, c, mx, s_mx,
                                 s_vmax);
  __syncthreads();
  int v_exp = 0;
  if constexpr (kTokenScales) v_exp = block_v_exp(s_vmax);
  const float v_rel = kTokenScales ? ldexpf(1.0f, -v_exp) : 1.0f;
  float m_use[2], m_all[2];
  float rowsum[2] = {0.0f, 0.0f};
  block_probabilities<kHalfMma, kTokenScales>(s, vsc, v_rel, warp, g, c, s_mx, m_use, m_all, rowsum,
                                              sP, s_sum);
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
  allow_dependent_launch();
  store_block_partials(prm, row, head0, nh, split, warp, g, c, acc, factor, lse);
}

template <typename CacheT, bool kTokenScales = false>
__global__ void __launch_bounds__(kBlockThreads, 2)
    sparse_attention_block_kernel(const SparseAttnParams prm) {
  extern __shared__ __align__(16) uint16_t blk_smem[];
  attend_block<CacheT, kTokenScales>(prm, attn_cta(prm), blk_smem);
}

}  // namespace cuda
}  // namespace msa
