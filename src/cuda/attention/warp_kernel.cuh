// sparse_attention_kernel: the 4-warp split-K kernel (any head dim the op supports, 16-key
// subtiles), whose warps run independent online softmaxes merged at the end.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/launch_policy.h"
#include "cuda/attention/params.cuh"
#include "cuda/attention/prologue.cuh"
#include "cuda/common.cuh"
#include "cuda/mma.cuh"

namespace msa {
namespace cuda {

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

}  // namespace cuda
}  // namespace msa
