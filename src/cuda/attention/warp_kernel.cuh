// sparse_attention_kernel: the 4-warp split-K kernel (head dim 64 or 128, any block size that is a
// multiple of 16), whose warps run independent online softmaxes over 16-key subtiles and are
// merged at the end.
//
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
// probabilities are rounded to f16.
//
// Each warp processes its subtiles while the loads of the next are in flight (a register double
// buffer). Three forms, chosen by the launcher from same-call A/B timings
// (bench/EXPERIMENTS.md: 2026-11-30-attn-two-buffers-ab, 2026-11-30-attn-e4m3-f16-ab):
//  * two buffers in turn (kTwoBuffers), no copy between them (the copy is ~65 register moves per
//    subtile): faster for 16-bit K/V with 4 rows per request. Its loop body is twice the code; in
//    the in-cluster calls of small batches (about 2 subtiles per warp) it made the whole decode
//    step slower, though the attention op alone was not;
//  * one buffer refilled from the next: the 16-bit in-cluster calls;
//  * the same two subtiles ahead: e4m3 K/V, whose loop waits on its loads rather than its
//    instructions (one or three subtiles ahead were slower). Its subtile fragments take 32
//    registers (40 with per-token-head scales); a 16-bit one's 64 would not leave room for a
//    second. Q's e4m3 scale (scale_q) is set once the first two subtiles' loads are in flight,
//    which then cover the barrier it needs.
//
// The step functions take the kernel's values by reference, as the lambdas they replaced
// captured them: passed by value, or declared as local arrays inside them, the same code
// compiled to different machine code (bench/ab/sass_hash.py).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/attention/merge_kernel.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/prologue.cuh"
#include "cuda/attention/softmax.cuh"
#include "cuda/common.cuh"
#include "cuda/mma.cuh"

namespace msa {
namespace cuda {

// The shapes of an instance: head dim D over K/V of CacheT; kTokenScales: e4m3 K/V with
// per-token-head scales (the only instances that carry scale registers).
template <typename CacheT, int D, bool kTokenScales>
struct WarpShape {
  static constexpr bool kE4m3F16 = std::is_same_v<CacheT, uint8_t>;
  static_assert(kE4m3F16 || !kTokenScales, "only e4m3 caches have scales");
  using Raw = typename KvTraits<CacheT>::Raw;
  static constexpr bool kHalfMma = KvTraits<CacheT>::kHalfMma;
  static constexpr int kSteps = D / 16;   // k-steps of QK^T
  static constexpr int kChunks = D / 32;  // 8-element K runs per lane per key
  static constexpr int kHalves = D / 64;  // 64-column groups of V and O
  static constexpr int kOutTiles = D / 8;
  static constexpr int kQItems = kSteps * 32 / kAttnThreads;  // Q fragment slots per thread
  static_assert(kQItems * kAttnThreads == kSteps * 32, "Q fragments per thread");
};

// A subtile's raw K/V fragments and, with per-token-head scales, the K and V scales of the lane's
// score and probability columns, keys {2c, 2c + 1, 2c + 8, 2c + 9} (q4 = key bit 0 + 2 x key bit
// 3), which are also the V rows it loads.
template <typename CacheT, int D, bool kTokenScales>
struct Subtile {
  using S = WarpShape<CacheT, D, kTokenScales>;
  typename S::Raw kr[2][S::kChunks];
  typename S::Raw vr[4][S::kHalves];
  float ksc[kTokenScales ? 4 : 1];
  float vsc[kTokenScales ? 4 : 1];
};

// Thread tid's Q fragment slots (load_q_items order) times q_mul, as MMA words in q_frag.
template <bool kHalfMma, int kSteps, int kQItems>
__device__ __forceinline__ void store_q_fragments(const float (&qv)[kQItems][2][4], float q_mul,
                                                  int tid, uint4 (&q_frag)[kSteps][32]) {
#pragma unroll
  for (int it = 0; it < kQItems; ++it) {
    const int i = tid + it * kAttnThreads;
    const auto& v = qv[it];
    q_frag[i >> 5][i & 31] = make_uint4(pack2<kHalfMma>(v[0][0] * q_mul, v[0][1] * q_mul),
                                        pack2<kHalfMma>(v[1][0] * q_mul, v[1][1] * q_mul),
                                        pack2<kHalfMma>(v[0][2] * q_mul, v[0][3] * q_mul),
                                        pack2<kHalfMma>(v[1][2] * q_mul, v[1][3] * q_mul));
  }
}

// The largest |q| of thread's Q slots over the warp.
template <int kQItems>
__device__ __forceinline__ float q_abs_max(const float (&qv)[kQItems][2][4]) {
  float mx = 0.0f;  // fmaxf drops NaNs
#pragma unroll
  for (int it = 0; it < kQItems; ++it) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int e = 0; e < 4; ++e) mx = fmaxf(mx, fabsf(qv[it][r][e]));
    }
  }
  return warp_max(mx);
}

// The split's range [begin, end) of the row's visible subtiles (16 keys each, spb per block, in
// list order), and the row's last visible subtile tail_i (-1 when the row's own block is not
// selected) with the last visible key within it, tail_last.
//
// Subtiles past the row's position can only be the tail of its own block, which is the last
// (largest) id of the ascending list, so the visible subtiles are a prefix of the list. Subtile
// counts and offsets within a page fit 32 bits (check_supported bounds block_size x token
// stride), so the loop's index arithmetic is 32-bit and incremental.
struct SubtileRange {
  int begin, end;
  int tail_i, tail_last;
};
__device__ __forceinline__ SubtileRange split_subtiles(const SparseAttnParams& prm,
                                                       const AttnList& list, int n_sel, int64_t own,
                                                       int64_t pos, int64_t bs, int spb,
                                                       int split) {
  int n_valid = n_sel * spb;
  int tail_last = 15, tail_i = -1;  // (declared in this order: the other moved two instructions)
  if (n_sel > 0 && list.list_id[n_sel - 1] == own) {
    const int in_block = static_cast<int>(pos - own * bs);
    n_valid = (n_sel - 1) * spb + in_block / 16 + 1;
    tail_i = n_valid - 1;
    tail_last = in_block % 16;
  }
  const int begin = split * prm.subtiles_per_split;
  return {begin, min(n_valid, begin + prm.subtiles_per_split), tail_i, tail_last};
}

// The V row (key within a subtile) of lane (g, c)'s q4-th V load.
__device__ __forceinline__ int v_row(int c, int q4) { return 2 * c + (q4 & 1) + 8 * (q4 >> 1); }

// A warp's loads of subtiles, given the kernel's values it reads (held by reference, as a
// lambda would capture them): K and V of the CTA's KV head, this lane's element offsets from a
// subtile's first key (k_lane: K rows g and g + 8 at column 8c; v_lane: V rows v_row(c, q4) at
// column 8g; the chunk columns are immediates), and the row's tail (SubtileRange).
//
// The row's last subtile may reach past the position: its keys there get P = 0, but their V rows
// still enter the P.V MMA, where a NaN or Inf in a slot not written yet would give 0 * NaN. So
// load reads the row's last visible key (row tail_last of subtile tail_i) and its scales in
// their place, a finite value whose product with 0 is 0.
template <typename CacheT, int D, bool kTokenScales>
struct SubtileLoader {
  using S = WarpShape<CacheT, D, kTokenScales>;
  using Raw = typename S::Raw;
  using Tile = Subtile<CacheT, D, kTokenScales>;
  const SparseAttnParams& prm;
  const AttnList& list;
  const CacheT* const& k_head;
  const CacheT* const& v_head;
  const int (&k_lane)[2];
  const int (&v_lane)[4];
  const int& k_tok;
  const int& v_tok;
  const int& g;
  const int& c;
  const int& kvh;
  const int64_t& bs;
  const int& tail_i;
  const int& tail_last;

  // V rows and scales of a subtile, rows past `last` replaced by row `last`.
  __device__ __forceinline__ void load_v_rows(int64_t page, int off, const CacheT* vb, int last,
                                              Tile& t) const {
#pragma unroll
    for (int q4 = 0; q4 < 4; ++q4) {
      const int v_off = v_row(c, q4) <= last ? v_lane[q4] : last * v_tok + 8 * g;
#pragma unroll
      for (int vh = 0; vh < S::kHalves; ++vh) {
        t.vr[q4][vh] = __ldg(reinterpret_cast<const Raw*>(vb + v_off + 64 * vh));
      }
    }
    if constexpr (kTokenScales) {
      const int64_t slot0 = page * bs + off;
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4) {
        const int64_t slot = slot0 + min(v_row(c, q4), last);
        t.ksc[q4] = scale_at(prm.k_scale, prm.ks_stride_head, prm.ks_stride_slot, kvh, slot);
        t.vsc[q4] = scale_at(prm.v_scale, prm.vs_stride_head, prm.vs_stride_slot, kvh, slot);
      }
    }
  }

  // Subtile ti of the row's range, the sb-th 16-key subtile of list entry li.
  __device__ __forceinline__ void load(int ti, int li, int sb, Tile& t) const {
    const int64_t page = list.list_page[li];
    const int off = sb * 16;
    const CacheT* kb = k_head + page * prm.k_stride_page + off * k_tok;
    const CacheT* vb = v_head + page * prm.v_stride_page + off * v_tok;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int tt = 0; tt < S::kChunks; ++tt) {
        t.kr[nt][tt] = __ldg(reinterpret_cast<const Raw*>(kb + k_lane[nt] + 32 * tt));
      }
    }
    // Rows past the position (only in subtile tail_i) read the last visible one. For 16-bit K/V
    // the test is a branch (uniform across the warp), so the other subtiles' loads take no
    // clamps; the e4m3 instances were slower that way
    // (bench/EXPERIMENTS.md: 2026-11-30-attn-tail-branch-16bit-ab).
    if constexpr (sizeof(CacheT) == 2) {
      if (ti == tail_i) {
        load_v_rows(page, off, vb, tail_last, t);
      } else {
        load_v_rows(page, off, vb, 15, t);
      }
    } else {
      load_v_rows(page, off, vb, ti == tail_i ? tail_last : 15, t);
    }
  }
};

// acc *= alpha per row. A row whose running max did not grow has alpha exactly 1, a
// multiplication that changes nothing: the rescale is skipped when that holds for every row of
// the warp.
template <int kOutTiles>
__device__ __forceinline__ void rescale_outputs(float (&acc)[kOutTiles][4],
                                                const float (&alpha)[2]) {
  if (__any_sync(0xFFFFFFFFu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
    for (int n = 0; n < kOutTiles; ++n) {
      acc[n][0] *= alpha[0];
      acc[n][1] *= alpha[0];
      acc[n][2] *= alpha[1];
      acc[n][3] *= alpha[1];
    }
  }
}

// S = Q K^T of a subtile: rows g, g + 8 (heads), keys 8 nt + 2c + {0, 1}.
template <bool kHalfMma, int kSteps, int kChunks, typename Raw>
__device__ __forceinline__ void subtile_logits(const uint4 (&q_frag)[kSteps][32], int lane,
                                               const Raw (&kr)[2][kChunks], float (&s)[2][4]) {
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
}

// Per-token-head V scales: the probabilities take their keys' V scales relative to 2^v_exp, the
// power of two just above the largest V scale so far; when it grows, the accumulators move to
// the new one (exactly, with alpha: both are scalings of the same sums). A subtile whose scales
// are all zero keeps it: raising it to 2^0 would round the later probabilities of small scales
// relative to 1, into f16's subnormals. Non-finite scales take 2^0.
__device__ __forceinline__ void apply_token_v_scales(const float (&vsc)[4], int& v_exp,
                                                     float (&alpha)[2], float (&p)[2][4]) {
  float vm = fmaxf(fmaxf(fabsf(vsc[0]), fabsf(vsc[1])), fmaxf(fabsf(vsc[2]), fabsf(vsc[3])));
  vm = quad_max(vm);
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
    for (int e2 = 0; e2 < 4; ++e2) p[nt][e2] *= vsc[(e2 & 1) + 2 * nt] * rel;
  }
}

// acc += P V of a subtile (see the PV layout above).
template <bool kHalfMma, int kHalves, int kOutTiles, typename Raw>
__device__ __forceinline__ void accumulate_pv(const float (&p)[2][4], const Raw (&vr)[4][kHalves],
                                              float (&acc)[kOutTiles][4]) {
  const uint4 pa = make_uint4(pack2<kHalfMma>(p[0][0], p[0][1]), pack2<kHalfMma>(p[0][2], p[0][3]),
                              pack2<kHalfMma>(p[1][0], p[1][1]), pack2<kHalfMma>(p[1][2], p[1][3]));
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
}

// A warp's online-softmax step over its subtiles, given the kernel's values it reads and updates
// (held by reference, as a lambda would capture them): Q's fragments, the row's list and
// position, the logit scale, and the warp's state: the output accumulators acc (n-tile n of P.V,
// rows g and g + 8), the online softmax's maxima m_run and sums l_run (online_softmax_update), and
// with per-token-head V scales the exponent v_exp of the power of two the accumulators are
// relative to (outputs times 2^-v_exp).
template <typename CacheT, int D, bool kTokenScales>
struct SubtileProcessor {
  using S = WarpShape<CacheT, D, kTokenScales>;
  const uint4 (&q_frag)[S::kSteps][32];
  const AttnList& list;
  const int64_t& bs;
  const int64_t& pos;
  const float& logit_scale;
  const int& lane;
  const int& c;
  float (&acc)[S::kOutTiles][4];
  float (&m_run)[2];
  float (&l_run)[2];
  int& v_exp;

  // Subtile (li, sb) of the row's list, whose fragments are in t: the logits of keys up to the
  // row's position update the softmax, and P.V the outputs.
  __device__ __forceinline__ void operator()(int li, int sb,
                                             const Subtile<CacheT, D, kTokenScales>& t) const {
    const int off = sb * 16;
    const int64_t j0 = static_cast<int64_t>(list.list_id[li]) * bs + off;
    float s[2][4];
    subtile_logits<S::kHalfMma>(q_frag, lane, t.kr, s);
    if constexpr (kTokenScales) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] *= t.ksc[(e & 1) + 2 * nt];
      }
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t j = j0 + nt * 8 + 2 * c + (e & 1);
        s[nt][e] = j <= pos ? s[nt][e] * logit_scale : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
      }
    }
    float alpha[2];
    online_softmax_update(m_run, l_run, s, mx, alpha);
    if constexpr (kTokenScales) apply_token_v_scales(t.vsc, v_exp, alpha, s);
    rescale_outputs(acc, alpha);
    accumulate_pv<S::kHalfMma>(s, t.vr, acc);
  }
};

// Advances (li, sb) by n subtiles along the list (spb subtiles per block).
__device__ __forceinline__ void advance(int& li, int& sb, int n, const int& spb) {
  sb += n;
  while (sb >= spb) {
    sb -= spb;
    ++li;
  }
}

// Merges the 4 warps' softmax states in fixed warp order: each warp's outputs, normalised by the
// merged sums, go to red; the caller sums them. With e4m3 K/V the V scale applies here, once per
// output: the per-layer one (v_layer), or the per-token-head ones' 2^v_exp. factor: the
// normalisation of rows g and g + 8 (an array of the caller's: one declared here changed the
// kernel's register allocation).
template <int D, bool kE4m3F16, bool kTokenScales>
__device__ __forceinline__ void merge_warps(const float (&acc)[D / 8][4], const float (&m_run)[2],
                                            float (&l_run)[2], const float& v_layer,
                                            const int& v_exp, const int& warp, const int& g,
                                            const int& c, float (&s_m)[kAttnWarps][kAttnHeads],
                                            float (&s_l)[kAttnWarps][kAttnHeads],
                                            float (&red)[kAttnWarps][kAttnHeads][D + 8],
                                            float (&factor)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) l_run[r] = quad_sum(l_run[r]);
  if (c == 0) {
    s_m[warp][g] = m_run[0];
    s_m[warp][g + 8] = m_run[1];
    s_l[warp][g] = l_run[0];
    s_l[warp][g + 8] = l_run[1];
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float m_all, base;
    const float l_all = merge_states(s_m, s_l, g + 8 * r, m_all, base);
    const float v_out = !kE4m3F16 ? 1.0f : kTokenScales ? ldexpf(1.0f, v_exp) : v_layer;
    factor[r] = l_all > 0.0f ? exp2f(m_run[r] - base) / l_all * v_out : 0.0f;
  }
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    *reinterpret_cast<float2*>(&red[warp][g][8 * n + 2 * c]) =
        make_float2(acc[n][0] * factor[0], acc[n][1] * factor[0]);
    *reinterpret_cast<float2*>(&red[warp][g + 8][8 * n + 2 * c]) =
        make_float2(acc[n][2] * factor[1], acc[n][3] * factor[1]);
  }
}

// Thread t's outputs after merge_warps: dim t % D of heads t / D + k (kAttnThreads / D), the sum
// of the warps' shares (all its shared-memory reads are independent and issued together, and a
// warp's global stores are contiguous).
template <int D, int kHeadsPerThread>
__device__ __forceinline__ void sum_warp_outputs(const float (&red)[kAttnWarps][kAttnHeads][D + 8],
                                                 const int& tid, float (&o)[kHeadsPerThread]) {
  constexpr int kHeadStep = kAttnThreads / D;
  const int d = tid % D;
  const int col = 8 * ((d >> 6) * 8 + (d & 7)) + 2 * ((d >> 4) & 3) + ((d >> 3) & 1);
#pragma unroll
  for (int k = 0; k < kHeadsPerThread; ++k) {
    const int hh = tid / D + k * kHeadStep;
    o[k] = ((red[0][hh][col] + red[1][hh][col]) + red[2][hh][col]) + red[3][hh][col];
  }
}

// splits == 1: thread t's outputs o (sum_warp_outputs) and, for t < nh, head t's LSE (natural
// log) go to out and lse.
template <int D, int kHeadsPerThread>
__device__ __forceinline__ void store_outputs(const SparseAttnParams& prm, const int64_t& row,
                                              const int& head0, const int& nh, const int& tid,
                                              const float (&o)[kHeadsPerThread],
                                              const float (&s_lse)[kAttnHeads]) {
  constexpr int kHeadStep = kAttnThreads / D;
  const int d = tid % D;
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
}

// Split-K with the merge kernel: the same values, as the split's partials in the workspace.
template <int D, int kHeadsPerThread>
__device__ __forceinline__ void store_partials(const SparseAttnParams& prm, const int64_t& row,
                                               const int& head0, const int& nh, const int& split,
                                               const int& tid, const float (&o)[kHeadsPerThread],
                                               const float (&s_lse)[kAttnHeads]) {
  constexpr int kHeadStep = kAttnThreads / D;
  const int d = tid % D;
  const int64_t T = prm.rows.num_rows;
#pragma unroll
  for (int k = 0; k < kHeadsPerThread; ++k) {
    const int hh = tid / D + k * kHeadStep;
    if (hh >= nh) break;
    prm.part_out[((split * T + row) * prm.num_q_heads + head0 + hh) * D + d] = o[k];
  }
  if (tid < nh) prm.part_lse[(split * T + row) * prm.num_q_heads + head0 + tid] = s_lse[tid];
}

template <typename CacheT, int D, bool kTwoBuffers, bool kTokenScales>
__global__ void __launch_bounds__(kAttnThreads)
    sparse_attention_kernel(const SparseAttnParams prm) {
  using S = WarpShape<CacheT, D, kTokenScales>;
  constexpr bool kE4m3F16 = S::kE4m3F16;
  constexpr bool kHalfMma = S::kHalfMma;
  __shared__ uint4 q_frag[S::kSteps][32];
  __shared__ AttnList s_list;
  __shared__ float s_m[kAttnWarps][kAttnHeads];  // the warps' softmax states
  __shared__ float s_l[kAttnWarps][kAttnHeads];
  __shared__ float s_lse[kAttnHeads];   // the CTA's log2-sum-exp per head
  __shared__ float s_qmax[kAttnWarps];  // e4m3: each warp's largest |q|
  // Per-warp outputs, row h = head: lane (g, c) stores the pair {dim da, dim da + 8} of n-tile n
  // as one float2 at 8n + 2c. The row stride D + 8 puts the 16 lanes of a half-warp on distinct
  // banks (a plain [h][d] layout had a 16-way conflict on these stores).
  __shared__ __align__(8) float s_red[kAttnWarps][kAttnHeads][D + 8];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const AttnCta cta = attn_cta(prm);
  const int64_t row = cta.row;
  const int kvh = cta.kvh, hc = cta.hc, split = cta.split, head0 = cta.head0, nh = cta.nh;

  // Prologue. Every load that does not depend on another is issued before any of them is used
  // (the top-k ids, Q, the row's sequence length), so it costs one memory round trip plus the
  // block-table one ("Issuing loads" in common.cuh). The row's request in a decode batch (row <
  // 2^31; unused with cu_seqlens_q):
  const int64_t req =
      div_u32(static_cast<uint32_t>(row), static_cast<uint32_t>(prm.rows.query_len));
  const uint32_t early_seq_len = ld_decode_seq_len_of(prm.rows, req);
  int32_t tk[kMaxTopkWidth / kAttnThreads];
  load_topk_ids<kAttnThreads>(prm, kvh, row, tid, tk);
  const float k_layer = prm.scale_mode == KvScaleMode::kPerLayer ? __ldg(prm.k_scale) : 1.0f;
  const float v_layer = prm.scale_mode == KvScaleMode::kPerLayer ? __ldg(prm.v_scale) : 1.0f;
  float qv[S::kQItems][2][4];  // heads past the group are zero rows
  load_q(prm, row, head0, nh, tid, qv);

  // One CTA per (row, KV head) reports bad values, so a bad entry costs one atomic.
  int32_t* flags = (split == 0 && hc == 0) ? prm.error_flags : nullptr;
  const int64_t bs = prm.rows.block_size;
  const AttnRow ar = attn_row(prm, cta, flags, early_seq_len, req, bs);
  const RowInfo& info = ar.info;
  const int64_t pos = ar.pos, own = ar.own;
  const bool live = ar.live;
  // Q goes to shared memory here, while its loads (issued with the top-k and sequence-length
  // ones) are the same round trip: written later it would wait a second one, and holding it in
  // registers across the block-table lookup lets the compiler sink the loads instead. With e4m3
  // K/V its scale needs the whole CTA's largest |q|, so each warp's goes to shared memory here
  // (which uses the loads just as well) and Q follows in scale_q.
  if constexpr (kE4m3F16) {
    const float mx = q_abs_max(qv);
    if (lane == 0) s_qmax[warp] = mx;
  } else {
    store_q_fragments<kHalfMma>(qv, 1.0f, tid, q_frag);
  }
  build_attn_list<kAttnThreads>(prm, tk, live, own, info.req, flags, s_list);
  __syncthreads();
  const int n_sel = s_list.nsel;
  // e4m3: Q's fragments and the logit scale (which takes Q's 2^-q_exp back), from the warps'
  // maxima; the main loop calls it. The other paths use prm.scale_log2 as it is.
  float logit_scale = 0.0f;
  auto scale_q = [&] {
    const int q_exp = q_scale_exp(s_qmax);
    store_q_fragments<kHalfMma>(qv, ldexpf(1.0f, q_exp), tid, q_frag);
    logit_scale = prm.scale_log2 * k_layer * ldexpf(1.0f, -q_exp);
    __syncthreads();
  };

  // The warp's state (SubtileProcessor). v_exp starts at the smallest normal exponent, so the
  // first positive scale sets it and 2^-v_exp stays finite when every scale is subnormal.
  float acc[S::kOutTiles][4];
#pragma unroll
  for (int n = 0; n < S::kOutTiles; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
  }
  float m_run[2] = {-INFINITY, -INFINITY};  // rows g and g + 8, log2 domain
  int v_exp = -126;
  float l_run[2] = {0.0f, 0.0f};  // this lane's share of the row sums

  // Main loop over the split's subtiles.
  const CacheT* k_all = static_cast<const CacheT*>(prm.k);
  const CacheT* v_all = static_cast<const CacheT*>(prm.v);
  const int spb = static_cast<int>(bs / 16);
  const SubtileRange range = split_subtiles(prm, s_list, n_sel, own, pos, bs, spb, split);
  const int sub_begin = range.begin, sub_end = range.end;
  const int tail_i = range.tail_i, tail_last = range.tail_last;
  const int k_tok = static_cast<int>(prm.k_stride_tok);
  const int v_tok = static_cast<int>(prm.v_stride_tok);
  const int k_lane[2] = {g * k_tok + 8 * c, (g + 8) * k_tok + 8 * c};
  int v_lane[4];
#pragma unroll
  for (int q4 = 0; q4 < 4; ++q4) v_lane[q4] = v_row(c, q4) * v_tok + 8 * g;
  const CacheT* k_head = k_all + kvh * prm.k_stride_head;
  const CacheT* v_head = v_all + kvh * prm.v_stride_head;
  using Tile = Subtile<CacheT, D, kTokenScales>;
  const SubtileLoader<CacheT, D, kTokenScales> loader{
      prm, s_list, k_head, v_head, k_lane, v_lane, k_tok, v_tok, g, c, kvh, bs, tail_i, tail_last};
  const float& logit = kE4m3F16 ? logit_scale : prm.scale_log2;
  const SubtileProcessor<CacheT, D, kTokenScales> process{q_frag, s_list, bs,    pos,   logit, lane,
                                                          c,      acc,    m_run, l_run, v_exp};
  // The warp's subtiles i, i + 4, ... < sub_end, (li, sb) = subtile i, in one of the three
  // double-buffer forms (see the top of this file).
  int i = sub_begin + warp;
  int li = static_cast<int>(div_u32(static_cast<uint32_t>(i), static_cast<uint32_t>(spb)));
  int sb = i - li * spb;
  // One subtile: issues the loads of the warp's next subtile into `next`, then computes (li, sb)
  // from `cur`.
  auto step = [&](const Tile& cur, Tile& next) {
    int li2 = li, sb2 = sb;
    advance(li2, sb2, kAttnWarps, spb);
    if (i + kAttnWarps < sub_end) loader.load(i + kAttnWarps, li2, sb2, next);
    process(li, sb, cur);
    i += kAttnWarps;
    li = li2;
    sb = sb2;
  };
  if constexpr (kTwoBuffers) {
    Tile ta, tb;
    if (i < sub_end) loader.load(i, li, sb, ta);
    while (i < sub_end) {
      step(ta, tb);
      if (i >= sub_end) break;
      step(tb, ta);
    }
  } else if constexpr (kE4m3F16) {
    Tile cur, next;
    int li1 = li, sb1 = sb;
    advance(li1, sb1, kAttnWarps, spb);
    if (i < sub_end) loader.load(i, li, sb, cur);
    if (i + kAttnWarps < sub_end) loader.load(i + kAttnWarps, li1, sb1, next);
    scale_q();
    while (i < sub_end) {
      int li2 = li1, sb2 = sb1;
      advance(li2, sb2, kAttnWarps, spb);
      Tile far;
      if (i + 2 * kAttnWarps < sub_end) loader.load(i + 2 * kAttnWarps, li2, sb2, far);
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
    if (i < sub_end) loader.load(i, li, sb, cur);
    while (i < sub_end) {
      Tile next;
      step(cur, next);
      cur = next;
    }
  }

  // Epilogue: the CTA's normalised outputs o and log2-sum-exps s_lse.
  float factor[2];
  merge_warps<D, kE4m3F16, kTokenScales>(acc, m_run, l_run, v_layer, v_exp, warp, g, c, s_m, s_l,
                                         s_red, factor);
  __syncthreads();
  constexpr int kHeadsPerThread = kAttnHeads / (kAttnThreads / D);
  float o[kHeadsPerThread];
  sum_warp_outputs<D>(s_red, tid, o);
  if (tid < kAttnHeads) {
    float m_all, base;
    const float l_all = merge_states(s_m, s_l, tid, m_all, base);
    s_lse[tid] = l_all > 0.0f ? m_all + log2f(l_all) : -INFINITY;
  }
  // s_lse[tid] was written by this thread.
  if (prm.splits == 1) {
    store_outputs<D>(prm, row, head0, nh, tid, o, s_lse);
    return;
  }
  if (!prm.cluster) {
    // The merge kernel combines the normalised partials and their log2-sum-exps. It is a
    // dependent launch that waits for them (wait_for_prior_grid), so it may start now: a
    // trigger at the CTA's start, after its main loop or at its exit made merge-kernel calls
    // slower (bench/EXPERIMENTS.md: 2026-12-01-attn-merge-trigger).
    allow_dependent_launch();
    store_partials<D>(prm, row, head0, nh, split, tid, o, s_lse);
    return;
  }
  // In-cluster merge (merge_kernel.cuh). Each CTA leaves its partial in s_red[0], free once
  // every thread has read its sums.
  __syncthreads();
  constexpr int kHeadStep = kAttnThreads / D;
  const int d = tid % D;
#pragma unroll
  for (int k = 0; k < kHeadsPerThread; ++k) s_red[0][tid / D + k * kHeadStep][d] = o[k];
  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  cluster.sync();
  const int splits = prm.splits;
  for (int hh = split + (tid / D) * splits; hh < nh; hh += kHeadStep * splits) {
    float part_lse[kAttnMaxClusterSplits], part_o[kAttnMaxClusterSplits];
    load_split_partials<D>(cluster, splits, hh, d, s_lse, s_red[0], part_lse, part_o);
    float out, lse;
    combine_splits(part_lse, part_o, splits, out, lse);
    store_from_float(prm.out, prm.out_dtype,
                     row * prm.out_stride_row + (head0 + hh) * prm.out_stride_head + d, out);
    if (d == 0 && prm.lse != nullptr) {
      prm.lse[row * prm.lse_stride_row + (head0 + hh) * prm.lse_stride_head] = lse;
    }
  }
  leave_cluster();
}

}  // namespace cuda
}  // namespace msa
