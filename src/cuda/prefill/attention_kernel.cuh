// Prefill attention on Hopper tensor cores, dense causal (layers 0-2) and sparse (spec A5), over
// the paged KV cache.
//
// Work item: one query tile (tokens of one request in an aligned window of 128 / G positions,
// prefill/tiles.cuh) x one KV head. Its 128 MMA rows are the tile's tokens x the G = 8 or 16 q
// heads of the KV head (row r = token r / G, head r % G), so every K/V block the tile visits is
// read once for all of them. The tile walks a list of blocks in ascending order: dense, every
// block up to the tile's own block; sparse, the union of its tokens' top-k blocks, each with the
// mask of the tokens that selected it (built in shared memory from a bitmap of the visible
// blocks, so duplicated or unordered top-k entries mean the same set).
//
// Three warpgroups. Warpgroup 0 produces the K and V tiles of each block into a ring (three stages
// dense, two sparse: attn_stages): 16-bit caches by bulk tensor copies (one 4-D map per side over
// [blocks, KV heads, slots, dims], so the packed and split layouts are read in place), e4m3 caches
// by its 128 threads loading, converting to bf16 exactly and storing in the swizzled layout, or
// (calls with at least 8 rows per block-table page, not batch invariant: core/launch_policy.h,
// prefill_kv_copied) by bulk tensor copies from a bf16 copy of the call's pages made once per
// call (copy_kv_bf16_kernel), so that every tile does not convert the same pages again.
// Warpgroups 1 and 2 own rows 0-63 and 64-127: per block, S = Q K^T (wgmma, Q and K from shared
// memory), an online softmax in fp32 in base 2, P rounded to the MMA type in registers, O += P V
// (wgmma, P from registers). Two consumer loops (attn_pipelined picks one per instantiation): dense
// attention over a 16-bit cache overlaps the softmax of block j with P.V of block j - 1
// (consume_dense_pipelined); e4m3 caches and sparse attention take one block at a time
// (consume_block). The e4m3 dense path stays on the sequential loop because the pipelined one
// measured slower there; its code is that of the sequential kernel, producer included.
//
// A row only updates on blocks its token selected: for the other rows of a live warpgroup the
// block's columns are masked to -inf and P is 0, so O, the row maximum and the row sum stay as they
// were; a warpgroup none of whose tokens selected a block skips it. Per-row arithmetic is therefore
// independent of the tile's other tokens and of the batch (bitwise, once a trailing -0 is made +0).
// Keys past a row's position in its own block are masked by select; a dense walk's other blocks are
// visible whole to every live row, so their softmax adds a row mask of 0 or -inf instead of testing
// columns (softmax_step_deferred). Slots past the request's length in its last page may hold
// anything (NaN included): K there is masked, and V rows there are zeroed in shared memory before
// P.V reads them (0 * NaN would be NaN).
//
// Bad values are flagged and skipped: a top-k id outside the tile's visible blocks
// (kDeviceErrorTopkId) is ignored; a page outside the cache (kDeviceErrorBlockId) drops its block
// for every row. Rows that belong to no tile (padding, requests whose metadata failed
// validation) are written by prefill_empty_rows_kernel: output 0, LSE -inf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/mma.cuh"
#include "cuda/prefill/tiles.cuh"
#include "cuda/row_map.cuh"
#include "cuda/sm90/hopper.cuh"

namespace msa {
namespace cuda {
namespace prefill {

constexpr int kAttnRows = 128;     // MMA rows per tile
constexpr int kAttnDim = 128;      // head dim
constexpr int kAttnKeys = 128;     // keys per block
constexpr int kAttnThreads = 384;  // producer warpgroup + two consumer warpgroups
constexpr int kAttnMaxStages = 3;
constexpr int kMaxUnion = 256;        // top-k entries per tile (tokens x top-k width)
constexpr int kMaxBitmapWords = 256;  // visible blocks per tile / 32 (sparse): 8192 blocks
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

constexpr int kTile16Bytes = kAttnKeys * kAttnDim * 2;  // one 16-bit K or V tile

// Whether an instantiation's consumers run the pipelined dense loop (consume_dense_pipelined):
// dense over a 16-bit cache only. Sparse blocks are skipped per warpgroup, which the pipeline
// does not do; e4m3 caches keep the sequential loop (consume_block), measured faster there.
// produce_tma zero-fills a dropped block's tiles exactly when its consumer is the pipelined one.
constexpr bool attn_pipelined(bool e4m3, bool sparse) { return !e4m3 && !sparse; }

// Stages of the K/V ring: three for dense walks, whose consumers release a stage only once its
// P.V is done (so a two-stage ring leaves a block's copy exposed between the release and the
// next Q K^T), two for sparse ones, whose union lists take the shared memory of the third.
constexpr int attn_stages(bool sparse) { return sparse ? 2 : 3; }

// The sparse walk's members (from union_block on) are allocated for sparse kernels only
// (attn_smem_bytes): a dense kernel with three stages has no room for them.
struct AttnSmem {
  uint64_t full_k[kAttnMaxStages];
  uint64_t full_v[kAttnMaxStages];
  uint64_t empty[kAttnMaxStages];
  uint64_t fix;                        // the V copy of a block that needs its tail zeroed
  int32_t stage_page[kAttnMaxStages];  // the page in the stage (< 0: the block is dropped)
  int32_t union_count;
  int32_t union_block[kMaxUnion];
  int32_t union_page[kMaxUnion];
  uint32_t union_mask[kMaxUnion];  // tokens of the tile that selected the block
  uint32_t bitmap[kMaxBitmapWords];
  int32_t word_base[kMaxBitmapWords];
};

constexpr size_t attn_smem_bytes(bool sparse) {
  return kAttnRows * kAttnDim * 2 + 2 * static_cast<size_t>(attn_stages(sparse)) * kTile16Bytes +
         (sparse ? sizeof(AttnSmem) : offsetof(AttnSmem, union_block)) + 1024;
}
static_assert(attn_smem_bytes(false) <= 227 * 1024 && attn_smem_bytes(true) <= 227 * 1024,
              "the ring fits an SM's shared memory");

struct AttnParams {
  RowMap rows;
  const int32_t* tile_offsets;  // the plan's offsets [num_requests + 2]
  const void* q;                // [T, Hq, 128], 16-byte aligned rows
  int64_t q_stride_row, q_stride_head;
  // e4m3 caches (read without TMA): K and V element strides of page, head, slot.
  const uint8_t* k8;
  const uint8_t* v8;
  int64_t k_stride[3], v_stride[3];
  int64_t num_cache_blocks;
  const int32_t* block_table;  // [num_requests, max_blocks]
  int64_t bt_stride_req, bt_stride_block;
  const int32_t* topk;  // sparse: [Hkv, >= T, K]
  int64_t tk_stride_head, tk_stride_row, tk_stride_col;
  int32_t topk_width;
  void* out;  // [T, Hq, 128]
  DType out_dtype;
  int64_t out_stride_row, out_stride_head;
  float* lse;  // optional [T, Hq]
  int64_t lse_stride_row, lse_stride_head;
  float scale_log2;      // softmax scale * log2(e)
  const float* k_scale;  // per-layer scales ([1] fp32 on the device), or null
  const float* v_scale;
  // Per-token-head scales of an e4m3 cache ([Hkv, num_blocks * 128] fp32; head, slot strides),
  // or null: applied as the producer converts K and V.
  const float* k_token_scale;
  const float* v_token_scale;
  int64_t k_token_stride[2], v_token_stride[2];
  int32_t group;        // q heads per KV head: 8 or 16
  int32_t tile_tokens;  // 128 / group
  int32_t* error_flags;
  // An e4m3 cache converted once per call (copy_kv_bf16_kernel): the producer reads block b of
  // request r at page r * max_blocks + b of the copies' maps; the page id in the block table is
  // still checked.
  bool kv_copied;
};

// The per-call bf16 copy of a dense call's e4m3 K and V: page r * max_blocks + b of each holds
// block b of request r (b below ceil(seq_len / 128)) for every KV head, [Hkv, 128 slots, 128
// dims], converted as the e4m3 producer converts (exactly, or times the slot's per-token-head
// scale and then rounded). Per-layer scales stay with the kernel (logits and output).
struct KvCopyParams {
  RowMap rows;
  const uint8_t* k8;
  const uint8_t* v8;
  int64_t k_stride[3], v_stride[3];  // element strides of page, head, slot
  int64_t num_cache_blocks;
  const int32_t* block_table;
  int64_t bt_stride_req, bt_stride_block;
  const float* k_token_scale;  // [Hkv, num_blocks * 128] or null
  const float* v_token_scale;
  int64_t k_token_stride[2], v_token_stride[2];
  int32_t num_kv_heads;
  uint8_t* k_copy;  // [num_requests * max_blocks, Hkv, 128, 128] bf16
  uint8_t* v_copy;
};

// Writes row `r` (0..127) of the 16-bit Q tile: token r / G, head r % G of KV head g, or zeros;
// `sign` (0 or 0x80008000) flips the sign of every element, exactly.
template <typename Load>
__device__ __forceinline__ void load_q_rows(uint8_t* sQ, int first_row, int t, uint32_t sign,
                                            Load&& row_ptr) {
  for (int c = t; c < 64 * 16; c += 128) {
    const int r = first_row + c / 16, chunk = c % 16;
    const uint8_t* src = row_ptr(r);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (src != nullptr) v = ld_raw_v4(src + chunk * 16);
    v = make_uint4(v.x ^ sign, v.y ^ sign, v.z ^ sign, v.w ^ sign);
    *reinterpret_cast<uint4*>(sQ + (chunk / 8) * (kAttnRows * 128) +
                              sm90::swizzled_chunk(static_cast<uint32_t>(r), chunk % 8)) = v;
  }
}

// 16 e4m3 values (one 16-byte word) -> 16 bf16 values in two 16-byte words: exactly, or
// (kScaled) each multiplied by `scale` in fp32 and then rounded, as the spec dequantises.
template <bool kScaled>
__device__ __forceinline__ void e4m3x16_to_bf16(uint4 in, float scale, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {in.x, in.y, in.z, in.w};
  uint32_t o[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t h0 = e4m3x2_to_f16x2<false>(w[i]), h1 = e4m3x2_to_f16x2<true>(w[i]);
    float2 f0 = __half22float2(*reinterpret_cast<const __half2*>(&h0));
    float2 f1 = __half22float2(*reinterpret_cast<const __half2*>(&h1));
    if constexpr (kScaled) {
      f0 = make_float2(f0.x * scale, f0.y * scale);
      f1 = make_float2(f1.x * scale, f1.y * scale);
    }
    o[2 * i] = sm90::pack2<sm90::Mma16::kBF16>(f0.x, f0.y);
    o[2 * i + 1] = sm90::pack2<sm90::Mma16::kBF16>(f1.x, f1.y);
  }
  lo = make_uint4(o[0], o[1], o[2], o[3]);
  hi = make_uint4(o[4], o[5], o[6], o[7]);
}

// Stores 16 bf16 values (dims 16 word .. + 15 of `slot`) into the swizzled 16-bit tile `dst`:
// chunks 2 word and 2 word + 1 of the slot's row in panel word / 4.
template <bool kScaled>
__device__ __forceinline__ void store_bf16x16(uint8_t* dst, int slot, int word, uint4 e4m3,
                                              float scale) {
  uint4 lo, hi;
  e4m3x16_to_bf16<kScaled>(e4m3, scale, lo, hi);
  uint8_t* panel = dst + (word / 4) * (kAttnKeys * 128);
  const uint32_t ch = static_cast<uint32_t>(2 * (word % 4));
  *reinterpret_cast<uint4*>(panel + sm90::swizzled_chunk(static_cast<uint32_t>(slot), ch)) = lo;
  *reinterpret_cast<uint4*>(panel + sm90::swizzled_chunk(static_cast<uint32_t>(slot), ch + 1)) = hi;
}

// The producer warpgroup's conversion of one block's e4m3 K and V tiles (128 slots x 128 dims of
// KV head g of `page`) into the swizzled bf16 tiles dk and dv; V slots from `valid` on are
// written as zeros; kTokenScales multiplies each slot by its per-token-head scales. Each thread
// issues its loads in rounds of 2 K and 2 V words before it converts any: the loads are volatile
// asm, so one load per conversion would leave a single global load in flight per thread and the
// producer latency-bound.
template <bool kTokenScales>
__device__ __forceinline__ void convert_e4m3_block(const AttnParams& p, int64_t page, int g,
                                                   int valid, uint8_t* dk, uint8_t* dv, int t) {
  const uint8_t* k_src = p.k8 + page * p.k_stride[0] + g * p.k_stride[1];
  const uint8_t* v_src = p.v8 + page * p.v_stride[0] + g * p.v_stride[1];
  // Words of each side per round: 16 registers (4 spill in 56; 2 with the scales beside them).
  constexpr int kRound = kTokenScales ? 1 : 2;
  constexpr int kSlotsPerPass = 128 / 8;  // the warpgroup covers 16 slots x 8 words per pass
  static_assert(kAttnKeys % (kSlotsPerPass * kRound) == 0, "whole rounds");
  const int word = t % 8;  // the same 16 dims of every slot this thread converts
  k_src += word * 16;
  v_src += word * 16;
#pragma unroll 1
  for (int slot0 = t / 8; slot0 < kAttnKeys; slot0 += kSlotsPerPass * kRound) {
    uint4 kw[kRound], vw[kRound];
    float ks[kRound], vs[kRound];
#pragma unroll
    for (int i = 0; i < kRound; ++i) {
      const int slot = slot0 + kSlotsPerPass * i;
      kw[i] = ld_raw_v4(k_src + slot * p.k_stride[2]);
      vw[i] = slot < valid ? ld_raw_v4(v_src + slot * p.v_stride[2]) : make_uint4(0, 0, 0, 0);
      if constexpr (kTokenScales) {
        // A slot past the length may hold a NaN scale as well as NaN values: its V stays zero
        // (0 * NaN would not), its K is masked.
        const int64_t cache_slot = page * kAttnKeys + slot;
        ks[i] = p.k_token_scale[g * p.k_token_stride[0] + cache_slot * p.k_token_stride[1]];
        vs[i] = slot < valid
                    ? p.v_token_scale[g * p.v_token_stride[0] + cache_slot * p.v_token_stride[1]]
                    : 0.0f;
      } else {
        ks[i] = vs[i] = 1.0f;
      }
    }
#pragma unroll
    for (int i = 0; i < kRound; ++i) {
      store_bf16x16<kTokenScales>(dk, slot0 + kSlotsPerPass * i, word, kw[i], ks[i]);
      store_bf16x16<kTokenScales>(dv, slot0 + kSlotsPerPass * i, word, vw[i], vs[i]);
    }
  }
}

// The copies of KvCopyParams: one CTA per (request, block) at a time, each thread converting
// 16-byte words of K and V. Blocks at or past a request's length and page ids outside the cache
// are skipped (the attention kernel flags the latter and never reads the former).
constexpr int kKvCopyThreads = 256;

template <bool kTokenScales>
__global__ void __launch_bounds__(kKvCopyThreads) copy_kv_bf16_kernel(const KvCopyParams p) {
  const int64_t units = static_cast<int64_t>(p.rows.num_requests) * p.rows.max_blocks;
  constexpr int kWords = kAttnKeys * kAttnDim / 16;  // 16-byte e4m3 words per head and side
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int32_t page = copy_unit_page(p.rows, p.block_table, p.bt_stride_req, p.bt_stride_block,
                                        p.num_cache_blocks, u);
    if (page < 0) continue;
    for (int c = static_cast<int>(threadIdx.x); c < 2 * p.num_kv_heads * kWords;
         c += kKvCopyThreads) {
      const bool is_v = c >= p.num_kv_heads * kWords;
      const int e = is_v ? c - p.num_kv_heads * kWords : c;
      const int g = e / kWords, slot = e % kWords / 8, word = e % 8;
      const int64_t* st = is_v ? p.v_stride : p.k_stride;
      const uint8_t* src = (is_v ? p.v8 : p.k8) + page * st[0] + g * st[1] + slot * st[2];
      const uint4 in = ld_raw_v4(src + word * 16);
      uint4 lo, hi;
      if constexpr (kTokenScales) {
        const float* sc = is_v ? p.v_token_scale : p.k_token_scale;
        const int64_t* sst = is_v ? p.v_token_stride : p.k_token_stride;
        const float scale =
            sc[g * sst[0] + (static_cast<int64_t>(page) * kAttnKeys + slot) * sst[1]];
        e4m3x16_to_bf16<true>(in, scale, lo, hi);
      } else {
        e4m3x16_to_bf16<false>(in, 1.0f, lo, hi);
      }
      auto* out = reinterpret_cast<uint4*>(
          (is_v ? p.v_copy : p.k_copy) +
          ((u * p.num_kv_heads + g) * kAttnKeys + slot) * (kAttnDim * 2) + word * 32);
      out[0] = lo;
      out[1] = hi;
    }
  }
}

// 2^x in one MUFU.EX2 (exp2f's subnormal handling costs three more instructions per value). A
// result below 2^-126 becomes 0: a probability is that small only next to the row's maximum term,
// which is 1, so the fp32 sums it would enter do not change. exp2(-inf) = 0.
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Online-softmax step of one block for this thread's two rows, short of rescaling O. s: the
// block's logits (raw dot products); lim0 / lim1: the last visible column of each row (-1: the
// row does not take the block); scale_log2 > 0 (a negative scale negates Q instead). Updates m
// (base-2 running maxima of the scaled logits) and l (this thread's partial sums), leaves P in s
// and the rows' rescale factors of O in corr (applied by the caller, after any P.V still in
// flight on O). The maximum is taken over the raw logits and scaled once (rounding is monotonic,
// so it is the maximum of the scaled logits), and each P is exp2 of one FFMA, s * scale - m.
//
// kMasked false: each row takes all of the block's columns or none (lim 127 or -1), and a row that
// takes none has finite logits (a dropped page's zeroed keys, or a row outside the tile's tokens,
// whose output is never written): such a row's block maximum is -inf and its FFMA adds -inf,
// instead of a column test and a select per value.
template <bool kMasked>
__device__ __forceinline__ void softmax_step_deferred(float (&s)[64], float (&m)[2], float (&l)[2],
                                                      float (&corr)[2], int t, int lim0, int lim1,
                                                      float scale_log2) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    const int h = (i >> 1) & 1;
    if constexpr (kMasked) {
      if (sm90::acc_col(t, i) > (h ? lim1 : lim0)) s[i] = -INFINITY;
    }
    mx[h] = fmaxf(mx[h], s[i]);
  }
  float neg_m[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 2));
    const bool takes = (h ? lim1 : lim0) >= 0;
    const float m_new = fmaxf(m[h], takes ? mx[h] * scale_log2 : -INFINITY);
    // A row with nothing visible yet keeps m = -inf: no rescale, and P = 0 below.
    corr[h] = m_new == -INFINITY ? 1.0f : exp2f(m[h] - m_new);
    neg_m[h] = !kMasked && !takes ? -INFINITY : m_new == -INFINITY ? 0.0f : -m_new;
    m[h] = m_new;
  }
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    const int h = (i >> 1) & 1;
    s[i] = ex2_ftz(fmaf(s[i], scale_log2, neg_m[h]));  // 0 for masked columns
    sum[h] += s[i];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) l[h] = l[h] * corr[h] + sum[h];
}

// O times the rows' rescale factors.
__device__ __forceinline__ void rescale_o(float (&o)[64], const float (&corr)[2]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] *= corr[(i >> 1) & 1];
}

// Online-softmax step of one block for this thread's two rows: softmax_step_deferred, then o
// rescaled by the row factors, unless the warp's factors are all 1 (no row maximum of the warp
// moved: most blocks once the first few are in). No MMA is in flight here (consume_block).
template <bool kMasked>
__device__ __forceinline__ void softmax_step(float (&s)[64], float (&o)[64], float (&m)[2],
                                             float (&l)[2], int t, int lim0, int lim1,
                                             float scale_log2) {
  float corr[2];
  softmax_step_deferred<kMasked>(s, m, l, corr, t, lim0, lim1, scale_log2);
  if (__any_sync(0xFFFFFFFFu, corr[0] != 1.0f || corr[1] != 1.0f)) rescale_o(o, corr);
}

// What every step of a CTA knows about its work item.
struct AttnWork {
  Tile tile;
  int g;               // KV head
  int64_t own;         // the tile's own block (the last visible one)
  int nblocks;         // blocks the tile walks
  int64_t tail_block;  // the request's last page
  int tail_valid;      // slots of it below the length (1..128)
};

// Producer step (sparse): the union of the tile's top-k lists, by the producer warpgroup's 128
// threads: mark the visible blocks in a bitmap, rank the marked ones by a prefix count, resolve
// their pages, then OR each entry's token into its block's mask. Entries outside the visible
// blocks are flagged and dropped; repeated entries mark the same block.
__device__ __forceinline__ void build_union(const AttnParams& p, const Tile& tile, int g,
                                            int64_t own, AttnSmem* ss, int t) {
  const int words = static_cast<int>((own + 32) / 32);  // covers blocks 0..own
  for (int w = t; w < words; w += 128) ss->bitmap[w] = 0;
  sm90::named_sync(1, 128);
  const int entries = p.tile_tokens * p.topk_width;
  for (int e = t; e < entries; e += 128) {
    const int tok = e / p.topk_width, col = e % p.topk_width;
    const int64_t pos = tile.win_pos + tok;
    if (pos < tile.lo || pos >= tile.hi) continue;
    const int64_t row = tile.row0 + (pos - tile.start_pos);
    const int32_t id = p.topk[g * p.tk_stride_head + row * p.tk_stride_row + col * p.tk_stride_col];
    if (id < 0) continue;
    if (id > own) {
      raise_error(p.error_flags, kDeviceErrorTopkId);
      continue;
    }
    atomicOr(&ss->bitmap[id / 32], 1u << (id % 32));
  }
  sm90::named_sync(1, 128);
  if (t < 32) {  // exclusive prefix count of the bitmap words, 32 words per round
    int carry = 0;
    for (int w0 = 0; w0 < words; w0 += 32) {
      const int w = w0 + t;
      const int c = w < words ? __popc(ss->bitmap[w]) : 0;
      int incl = c;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const int n = __shfl_up_sync(0xFFFFFFFFu, incl, off);
        if (t >= off) incl += n;
      }
      if (w < words) ss->word_base[w] = carry + incl - c;
      carry += __shfl_sync(0xFFFFFFFFu, incl, 31);
    }
    if (t == 0) ss->union_count = carry;
  }
  sm90::named_sync(1, 128);
  for (int w = t; w < words; w += 128) {
    uint32_t bits = ss->bitmap[w];
    int rank = ss->word_base[w];
    while (bits != 0) {
      const int b = __ffs(static_cast<int>(bits)) - 1;
      bits &= bits - 1;
      const int64_t blk = static_cast<int64_t>(w) * 32 + b;
      const int32_t page = p.block_table[tile.req * p.bt_stride_req + blk * p.bt_stride_block];
      const bool ok = page >= 0 && page < p.num_cache_blocks;
      if (!ok) raise_error(p.error_flags, kDeviceErrorBlockId);
      ss->union_block[rank] = static_cast<int32_t>(blk);
      ss->union_page[rank] = !ok ? -1
                             : p.kv_copied
                                 ? static_cast<int32_t>(tile.req * p.rows.max_blocks + blk)
                                 : page;
      ss->union_mask[rank] = 0;
      ++rank;
    }
  }
  sm90::named_sync(1, 128);
  for (int e = t; e < entries; e += 128) {
    const int tok = e / p.topk_width, col = e % p.topk_width;
    const int64_t pos = tile.win_pos + tok;
    if (pos < tile.lo || pos >= tile.hi) continue;
    const int64_t row = tile.row0 + (pos - tile.start_pos);
    const int32_t id = p.topk[g * p.tk_stride_head + row * p.tk_stride_row + col * p.tk_stride_col];
    if (id < 0 || id > own) continue;
    const uint32_t word = ss->bitmap[id / 32];
    const int rank = ss->word_base[id / 32] + __popc(word & ((1u << (id % 32)) - 1u));
    atomicOr(&ss->union_mask[rank], 1u << tok);
  }
}

// The block and page of union entry u: block u of the dense walk (page from the block table,
// read ahead a warp's 32 at a time into `page_ahead` when `lane` is given) or the union's.
template <bool kSparse>
__device__ __forceinline__ int32_t entry_page(const AttnParams& p, const AttnWork& w,
                                              const AttnSmem* ss, int u, int64_t& blk) {
  blk = u;
  if constexpr (kSparse) {
    blk = ss->union_block[u];
    return ss->union_page[u];
  } else {
    const int32_t page =
        p.block_table[w.tile.req * p.bt_stride_req + static_cast<int64_t>(u) * p.bt_stride_block];
    return page >= 0 && page < p.num_cache_blocks ? page : -1;
  }
}

// Producer step (16-bit caches): one warp hands the consumers each block's K and V tiles by bulk
// tensor copies into the ring. The request's last page lands its V on `fix` first, so that its
// slots past the length can be zeroed before the stage is handed over.
template <bool kSparse>
__device__ __forceinline__ void produce_tma(const CUtensorMap& k_map, const CUtensorMap& v_map,
                                            const AttnParams& p, const AttnWork& w, AttnSmem* ss,
                                            uint8_t* sK, uint8_t* sV, int lane) {
  uint32_t fix_phase = 0;
  if (lane == 0) {
    sm90::tma_prefetch_map(&k_map);
    sm90::tma_prefetch_map(&v_map);
  }
  constexpr int kStages = attn_stages(kSparse);
  int32_t page_ahead = 0;  // dense: pages of blocks u0 .. u0 + 31, one per lane
  for (int u = 0; u < w.nblocks; ++u) {
    const int s = u % kStages;
    int64_t blk = u;
    int32_t page;
    if constexpr (kSparse) {
      page = entry_page<true>(p, w, ss, u, blk);
    } else {
      if (u % 32 == 0) {
        const int64_t b = u + lane;
        page_ahead =
            b < w.nblocks ? p.block_table[w.tile.req * p.bt_stride_req + b * p.bt_stride_block] : 0;
      }
      page = __shfl_sync(0xFFFFFFFFu, page_ahead, u % 32);
      if (page < 0 || page >= p.num_cache_blocks) {
        if (lane == 0) raise_error(p.error_flags, kDeviceErrorBlockId);
        page = -1;
      } else if (p.kv_copied) {
        page = static_cast<int32_t>(w.tile.req * p.rows.max_blocks + u);
      }
    }
    if (u >= kStages) sm90::barrier_wait(&ss->empty[s], ((u / kStages) - 1) & 1);
    uint8_t* dk = sK + s * kTile16Bytes;
    uint8_t* dv = sV + s * kTile16Bytes;
    if (lane == 0) ss->stage_page[s] = page;
    __syncwarp();
    if (page < 0) {
      if constexpr (attn_pipelined(false, kSparse)) {
        // A dropped block's tiles are zeros: the pipelined consumer masks the block for every
        // row but still multiplies its tiles (0 * NaN would be NaN). The sequential one skips it.
        for (int c = lane; c < 2 * kTile16Bytes / 16; c += 32) {
          uint8_t* d = c < kTile16Bytes / 16 ? dk + 16 * c : dv + 16 * (c - kTile16Bytes / 16);
          *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
        }
        sm90::fence_async_shared();
        __syncwarp();
      }
      if (lane == 0) {
        sm90::barrier_arrive(&ss->full_k[s]);
        sm90::barrier_arrive(&ss->full_v[s]);
      }
      continue;
    }
    if (lane == 0) {
      sm90::barrier_expect_tx(&ss->full_k[s], kTile16Bytes);
      sm90::tma_load_4d(&k_map, &ss->full_k[s], dk, 0, 0, w.g, page);
      sm90::tma_load_4d(&k_map, &ss->full_k[s], dk + kAttnKeys * 128, 64, 0, w.g, page);
    }
    if (blk != w.tail_block || w.tail_valid == kAttnKeys) {
      if (lane == 0) {
        sm90::barrier_expect_tx(&ss->full_v[s], kTile16Bytes);
        sm90::tma_load_4d(&v_map, &ss->full_v[s], dv, 0, 0, w.g, page);
        sm90::tma_load_4d(&v_map, &ss->full_v[s], dv + kAttnKeys * 128, 64, 0, w.g, page);
      }
      continue;
    }
    if (lane == 0) {
      sm90::barrier_expect_tx(&ss->fix, kTile16Bytes);
      sm90::tma_load_4d(&v_map, &ss->fix, dv, 0, 0, w.g, page);
      sm90::tma_load_4d(&v_map, &ss->fix, dv + kAttnKeys * 128, 64, 0, w.g, page);
    }
    sm90::barrier_wait(&ss->fix, fix_phase);
    fix_phase ^= 1;
    for (int c = lane; c < (kAttnKeys - w.tail_valid) * 16; c += 32) {
      const int slot = w.tail_valid + c / 16, chunk = c % 16;
      *reinterpret_cast<uint4*>(dv + (chunk / 8) * (kAttnKeys * 128) +
                                sm90::swizzled_chunk(static_cast<uint32_t>(slot), chunk % 8)) =
          make_uint4(0, 0, 0, 0);
    }
    sm90::fence_async_shared();
    __syncwarp();
    if (lane == 0) sm90::barrier_arrive(&ss->full_v[s]);
  }
}

// Producer step (e4m3 caches): the warpgroup's 128 threads convert each block's K and V to bf16
// tiles (V's slots past the request's length as zeros) and hand the stage over.
template <bool kSparse, bool kTokenScales>
__device__ __forceinline__ void produce_e4m3(const AttnParams& p, const AttnWork& w, AttnSmem* ss,
                                             uint8_t* sK, uint8_t* sV, int t) {
  constexpr int kStages = attn_stages(kSparse);
  for (int u = 0; u < w.nblocks; ++u) {
    const int s = u % kStages;
    if (u >= kStages) sm90::barrier_wait(&ss->empty[s], ((u / kStages) - 1) & 1);
    int64_t blk = u;
    const int32_t page = entry_page<kSparse>(p, w, ss, u, blk);
    if (!kSparse && page < 0 && t == 0) raise_error(p.error_flags, kDeviceErrorBlockId);
    if (page >= 0) {
      const int valid = blk == w.tail_block ? w.tail_valid : kAttnKeys;
      convert_e4m3_block<kTokenScales>(p, page, w.g, valid, sK + s * kTile16Bytes,
                                       sV + s * kTile16Bytes, t);
      sm90::fence_async_shared();
    }
    sm90::named_sync(1, 128);
    if (t == 0) {
      ss->stage_page[s] = page;
      sm90::barrier_arrive(&ss->full_k[s]);
      sm90::barrier_arrive(&ss->full_v[s]);
    }
  }
}

// A consumer thread's two rows (r0 and r0 + 8 of the tile's 128) and the running softmax state.
struct AttnRows {
  int tok[2];
  int64_t pos[2];
  bool live[2];    // the row is one of the tile's query tokens
  int own_lim[2];  // last visible column of the own block
  float o[64];     // unnormalised output (the m64n128 accumulator fragment)
  float m[2], l[2];
};

// Issues S = Q K^T of one block into s_acc (fenced before, committed, not waited for).
template <sm90::Mma16 kMma>
__device__ __forceinline__ void issue_qk_mma(uint32_t q_addr, uint32_t kt, float (&s_acc)[64]) {
  sm90::fence_acc(s_acc);
  sm90::mma_begin();
#pragma unroll
  for (int kk = 0; kk < kAttnDim / 16; ++kk) {
    sm90::mma_ss<kMma, false>(sm90::kmajor16_desc(q_addr, kAttnRows, kk),
                              sm90::kmajor16_desc(kt, kAttnKeys, kk), s_acc,
                              kk == 0 ? sm90::gmma::ScaleOut::Zero : sm90::gmma::ScaleOut::One);
  }
  sm90::mma_commit();
}

// P (the softmax step's probabilities in s_acc) rounded to the MMA type as the A fragments of P.V.
template <sm90::Mma16 kMma>
__device__ __forceinline__ void pack_p(const float (&s_acc)[64], uint32_t (&pa)[8][4]) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      pa[kk][j] = sm90::pack2<kMma>(s_acc[8 * kk + 2 * j], s_acc[8 * kk + 2 * j + 1]);
  }
}

// Issues O += P V of one block (fenced before, committed, not waited for).
template <sm90::Mma16 kMma>
__device__ __forceinline__ void issue_pv_mma(const uint32_t (&pa)[8][4], uint32_t vt,
                                             float (&o)[64]) {
  sm90::fence_acc(o);
  sm90::mma_begin();
#pragma unroll
  for (int kk = 0; kk < kAttnKeys / 16; ++kk) {
    sm90::mma_rs<kMma>(pa[kk], sm90::mnmajor16_desc(vt, kAttnKeys, kk), o);
  }
  sm90::mma_commit();
}

// Consumer step: one block for this warpgroup's 64 rows. S = Q K^T, the rows' masks, an online
// softmax step, P rounded to the MMA type in registers, O += P V. The MMAs complete inside the
// step, so no wgmma is in flight across the caller's branches (nor across the softmax's). A
// dense walk's blocks other than the own one take softmax_step_deferred's unmasked form.
template <sm90::Mma16 kMma, bool kSparse>
__device__ __forceinline__ void consume_block(AttnRows& r, float (&s_acc)[64], uint32_t q_addr,
                                              uint32_t kt, uint32_t vt, uint64_t* full_v,
                                              uint32_t phase, uint32_t mask, bool is_own, int t,
                                              float scale_log2) {
  issue_qk_mma<kMma>(q_addr, kt, s_acc);
  sm90::mma_wait<0>();
  sm90::fence_acc(s_acc);
  int lim[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const bool take = r.live[h] && ((mask >> r.tok[h]) & 1u);
    lim[h] = take ? (is_own ? r.own_lim[h] : 127) : -1;
  }
  if (!kSparse && !is_own) {
    softmax_step<false>(s_acc, r.o, r.m, r.l, t, lim[0], lim[1], scale_log2);
  } else {
    softmax_step<true>(s_acc, r.o, r.m, r.l, t, lim[0], lim[1], scale_log2);
  }
  uint32_t pa[8][4];
  pack_p<kMma>(s_acc, pa);
  sm90::barrier_wait(full_v, phase);
  issue_pv_mma<kMma>(pa, vt, r.o);
  sm90::mma_wait<0>();
  sm90::fence_acc(r.o);
}

// Dense consumer loop with the softmax overlapping the tensor cores (FA3's intra-warpgroup
// pipelining): per block j, S_j = Q K_j^T and O += P_{j-1} V_{j-1} are both issued, the softmax
// of S_j runs while P.V does, and O is rescaled by block j's factor once P.V completes. Every
// block is live for every row (dense); a dropped page was zero-filled by produce_tma and is
// masked for all rows. No branch separates an issue from its wait. 16-bit caches only
// (attn_pipelined).
template <sm90::Mma16 kMma>
__device__ __forceinline__ void consume_dense_pipelined(AttnRows& r, const AttnWork& w,
                                                        AttnSmem* ss, uint32_t q_addr,
                                                        uint32_t k_base, uint32_t v_base, int t,
                                                        float scale_log2) {
  constexpr int kStages = attn_stages(false);
  float s_acc[64];
  uint32_t pa[8][4];
  auto issue_qk = [&](int u) {
    issue_qk_mma<kMma>(q_addr, k_base + static_cast<uint32_t>((u % kStages) * kTile16Bytes), s_acc);
  };
  auto issue_pv = [&](int u) {
    issue_pv_mma<kMma>(pa, v_base + static_cast<uint32_t>((u % kStages) * kTile16Bytes), r.o);
  };
  auto limits = [&](int u, int(&lim)[2]) {
    const bool usable = ss->stage_page[u % kStages] >= 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      lim[h] = r.live[h] && usable ? (u == w.own ? r.own_lim[h] : kAttnKeys - 1) : -1;
    }
  };
  auto phase = [](int u) { return static_cast<uint32_t>((u / kStages) & 1); };
  // The softmax of block u; kMasked only for the own block, the one whose columns differ by row.
  auto softmax = [&](auto masked, int u, float(&corr)[2]) {
    int lim[2];
    limits(u, lim);
    softmax_step_deferred<decltype(masked)::value>(s_acc, r.m, r.l, corr, t, lim[0], lim[1],
                                                   scale_log2);
  };
  // Block u's S and block u - 1's P.V (u >= 1).
  auto step = [&](auto masked, int u) {
    sm90::barrier_wait(&ss->full_k[u % kStages], phase(u));
    issue_qk(u);
    sm90::barrier_wait(&ss->full_v[(u - 1) % kStages], phase(u - 1));
    issue_pv(u - 1);
    sm90::mma_wait<1>();
    sm90::fence_acc(s_acc);
    float corr[2];
    softmax(masked, u, corr);
    sm90::mma_wait<0>();
    sm90::fence_acc(r.o);
    sm90::barrier_arrive(&ss->empty[(u - 1) % kStages]);
    rescale_o(r.o, corr);
    pack_p<kMma>(s_acc, pa);
  };
  auto first = [&](auto masked) {
    sm90::barrier_wait(&ss->full_k[0], 0);
    issue_qk(0);
    sm90::mma_wait<0>();
    sm90::fence_acc(s_acc);
    float corr[2];
    softmax(masked, 0, corr);
    pack_p<kMma>(s_acc, pa);
  };
  constexpr std::false_type kWhole{};
  constexpr std::true_type kOwn{};

  // The own block is the walk's last (dense: blocks 0 .. own).
  if (w.nblocks == 1) {
    first(kOwn);
  } else {
    first(kWhole);
    for (int u = 1; u < w.nblocks - 1; ++u) step(kWhole, u);
    step(kOwn, w.nblocks - 1);
  }
  const int last = w.nblocks - 1;
  sm90::barrier_wait(&ss->full_v[last % kStages], phase(last));
  issue_pv(last);
  sm90::mma_wait<0>();
  sm90::fence_acc(r.o);
  sm90::barrier_arrive(&ss->empty[last % kStages]);
}

// Epilogue: O / l (times the V scale) and the LSE of this thread's live rows, -0 written as +0.
__device__ __forceinline__ void write_rows(const AttnParams& p, const AttnWork& w, AttnRows& r,
                                           int r0, int t, float v_scale) {
  float inv[2], lse_v[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    r.l[h] += __shfl_xor_sync(0xFFFFFFFFu, r.l[h], 1);
    r.l[h] += __shfl_xor_sync(0xFFFFFFFFu, r.l[h], 2);
    inv[h] = r.l[h] > 0.0f ? v_scale / r.l[h] : 0.0f;
    lse_v[h] = r.l[h] > 0.0f ? (r.m[h] + log2f(r.l[h])) * kLn2 : -INFINITY;
  }
  const int G = p.group;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!r.live[h]) continue;
    const int64_t row = w.tile.row0 + (r.pos[h] - w.tile.start_pos);
    const int64_t head = static_cast<int64_t>(w.g) * G + (r0 + 8 * h) % G;
    const int64_t off = row * p.out_stride_row + head * p.out_stride_head;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float x0 = r.o[4 * j + 2 * h] * inv[h] + 0.0f;
      const float x1 = r.o[4 * j + 2 * h + 1] * inv[h] + 0.0f;
      const int64_t col = 8 * j + 2 * (t & 3);
      switch (p.out_dtype) {
        case DType::kBF16:
          *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p.out) + off + col) =
              sm90::pack2<sm90::Mma16::kBF16>(x0, x1);
          break;
        case DType::kF16:
          *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p.out) + off + col) =
              sm90::pack2<sm90::Mma16::kF16>(x0, x1);
          break;
        default:
          *reinterpret_cast<float2*>(static_cast<float*>(p.out) + off + col) = make_float2(x0, x1);
          break;
      }
    }
    if (p.lse != nullptr && (t & 3) == 0)
      p.lse[row * p.lse_stride_row + head * p.lse_stride_head] = lse_v[h];
  }
}

template <sm90::Mma16 kMma, bool kE4M3, bool kSparse, bool kTokenScales = false>
__global__ void __launch_bounds__(kAttnThreads, 1)
    prefill_attention_sm90_kernel(const __grid_constant__ CUtensorMap k_map,
                                  const __grid_constant__ CUtensorMap v_map, const AttnParams p) {
  static_assert(kE4M3 || !kTokenScales, "per-token-head scales come with e4m3 caches");
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = sm90::align_dynamic_smem(smem_raw);
  uint8_t* sQ = smem;
  uint8_t* sK = sQ + kAttnRows * kAttnDim * 2;
  constexpr int kStages = attn_stages(kSparse);
  uint8_t* sV = sK + kStages * kTile16Bytes;
  auto* ss = reinterpret_cast<AttnSmem*>(sV + kStages * kTile16Bytes);

  const int32_t total = p.tile_offsets[p.rows.num_requests];
  const int32_t tile_index = total - 1 - static_cast<int32_t>(blockIdx.x);
  if (tile_index < 0) return;
  AttnWork w;
  w.tile = find_tile(p.rows, p.tile_offsets, tile_index, p.tile_tokens);
  w.g = static_cast<int>(blockIdx.y);
  w.own = w.tile.win_pos / kAttnKeys;
  const int G = p.group;
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int t = tid % 128;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      sm90::barrier_init(&ss->full_k[s], 1);
      sm90::barrier_init(&ss->full_v[s], 1);
      sm90::barrier_init(&ss->empty[s], 256);  // every consumer thread arrives
    }
    sm90::barrier_init(&ss->fix, 1);
    sm90::barrier_init_fence();
  }

  // The logits' scale, base 2: the softmax scale times K's per-layer e4m3 scale (V's multiplies
  // the normalised output). The softmax takes a positive one: a negative scale negates Q instead
  // (s * scale = (-s) * |scale| exactly).
  float scale_log2 = p.k_scale != nullptr ? p.scale_log2 * *p.k_scale : p.scale_log2;
  const uint32_t q_sign = scale_log2 < 0.0f ? 0x80008000u : 0u;
  scale_log2 = fabsf(scale_log2);

  // Set-up: the producer warpgroup builds the block list (sparse), the consumers load Q.
  if (wg == 0) {
    if constexpr (kSparse) {
      build_union(p, w.tile, w.g, w.own, ss, t);
    } else if (t == 0) {
      ss->union_count = static_cast<int32_t>(w.own + 1);
    }
  } else {
    load_q_rows(sQ, 64 * (wg - 1), t, q_sign, [&](int r) -> const uint8_t* {
      const int64_t pos = w.tile.win_pos + r / G;
      if (pos < w.tile.lo || pos >= w.tile.hi) return nullptr;
      const int64_t row = w.tile.row0 + (pos - w.tile.start_pos);
      return static_cast<const uint8_t*>(p.q) +
             (row * p.q_stride_row + (static_cast<int64_t>(w.g) * G + r % G) * p.q_stride_head) * 2;
    });
    sm90::fence_async_shared();
  }
  __syncthreads();
  w.nblocks = __shfl_sync(0xFFFFFFFFu, ss->union_count, 0);
  w.tail_block = (w.tile.seq_len - 1) / kAttnKeys;
  w.tail_valid = static_cast<int>(w.tile.seq_len - w.tail_block * kAttnKeys);

  // Register split: the CTA holds 168 x 384 registers (launch bounds); producer + consumers
  // must fit in them, or setmaxnreg.inc waits forever: 32 + 2 x 232, or 56 + 2 x 224 (e4m3).
  if (wg == 0) {
    if constexpr (kE4M3) {
      sm90::regs_dealloc<56>();
      produce_e4m3<kSparse, kTokenScales>(p, w, ss, sK, sV, t);
    } else {
      sm90::regs_dealloc<32>();
      if (t < 32) produce_tma<kSparse>(k_map, v_map, p, w, ss, sK, sV, t);
    }
    return;
  }
  if constexpr (kE4M3) {
    sm90::regs_alloc<224>();
  } else {
    sm90::regs_alloc<232>();
  }

  const int cw = wg - 1;  // rows 64 cw .. 64 cw + 63
  const uint32_t q_addr = sm90::smem_addr(sQ) + static_cast<uint32_t>(cw) * 64u * 128u;
  const uint32_t k_base = sm90::smem_addr(sK), v_base = sm90::smem_addr(sV);
  const int r0 = 64 * cw + sm90::acc_row(t, 0);
  AttnRows r;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    r.tok[h] = (r0 + 8 * h) / G;
    r.pos[h] = w.tile.win_pos + r.tok[h];
    r.live[h] = r.pos[h] >= w.tile.lo && r.pos[h] < w.tile.hi;
    r.own_lim[h] = static_cast<int>(
        min(max(r.pos[h] - w.own * kAttnKeys, int64_t{-1}), int64_t{kAttnKeys - 1}));
    r.m[h] = -INFINITY;
    r.l[h] = 0.0f;
  }
#pragma unroll
  for (int i = 0; i < 64; ++i) r.o[i] = 0.0f;
  // Tokens of this warpgroup: 64 / G of them from token 64 cw / G.
  const uint32_t wg_tokens = ((1u << (64 / G)) - 1u) << (64 * cw / G);
  const float v_scale = p.v_scale != nullptr ? *p.v_scale : 1.0f;
  if constexpr (attn_pipelined(kE4M3, kSparse)) {
    consume_dense_pipelined<kMma>(r, w, ss, q_addr, k_base, v_base, t, scale_log2);
  } else {
    float s_acc[64];
    for (int u = 0; u < w.nblocks; ++u) {
      const int s = u % kStages;
      const uint32_t phase = (u / kStages) & 1;
      int64_t blk = u;
      uint32_t mask = 0xFFFFFFFFu;
      if constexpr (kSparse) {
        blk = ss->union_block[u];
        mask = ss->union_mask[u];
      }
      sm90::barrier_wait(&ss->full_k[s], phase);
      if ((mask & wg_tokens) != 0 && ss->stage_page[s] >= 0) {
        consume_block<kMma, kSparse>(r, s_acc, q_addr,
                                     k_base + static_cast<uint32_t>(s * kTile16Bytes),
                                     v_base + static_cast<uint32_t>(s * kTile16Bytes),
                                     &ss->full_v[s], phase, mask, blk == w.own, t, scale_log2);
      } else {
        sm90::barrier_wait(&ss->full_v[s], phase);  // a skipped stage is released after its data
      }
      sm90::barrier_arrive(&ss->empty[s]);
    }
  }
  write_rows(p, w, r, r0, t, v_scale);
}

// Rows no tile writes (padding, requests whose metadata failed validation): output 0, LSE -inf.
// Grid-stride over rows; one warp per (row, q head).
__global__ void __launch_bounds__(256)
    prefill_empty_rows_kernel(RowMap rows, const int32_t* tile_offsets, int32_t num_q_heads,
                              void* out, DType out_dtype, int64_t out_stride_row,
                              int64_t out_stride_head, float* lse, int64_t lse_stride_row,
                              int64_t lse_stride_head) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t items = rows.num_rows * num_q_heads;
  for (int64_t it = static_cast<int64_t>(blockIdx.x) * 8 + warp; it < items;
       it += static_cast<int64_t>(gridDim.x) * 8) {
    const int64_t row = it / num_q_heads, h = it % num_q_heads;
    if (row_is_tiled(rows, tile_offsets, row)) continue;
    const int64_t off = row * out_stride_row + h * out_stride_head;
    for (int d = lane; d < kAttnDim; d += 32) store_from_float(out, out_dtype, off + d, 0.0f);
    if (lse != nullptr && lane == 0) lse[row * lse_stride_row + h * lse_stride_head] = -INFINITY;
  }
}

}  // namespace prefill
}  // namespace cuda
}  // namespace msa
