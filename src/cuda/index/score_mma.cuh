// The tensor-core block scorers (head dim a multiple of 64): index_score_mma_kernel (static
// grid), index_score_mma_balanced_kernel (balanced decode grid) and
// index_score_mma_cluster_kernel (in-cluster selection).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/launch_policy.h"
#include "cuda/common.cuh"
#include "cuda/index/block_maxima.cuh"
#include "cuda/index/cluster_select.cuh"
#include "cuda/index/params.cuh"
#include "cuda/index/select.cuh"
#include "cuda/mma.cuh"
#include "cuda/row_map.cuh"

namespace msa {
namespace cuda {

// Every accepted operand is exactly representable in bf16: index_q is bf16 or e4m3, the keys
// bf16 or e4m3 (e4m3 -> f16 -> f32 -> bf16 is exact: 3-bit mantissa, exponents 2^-9..2^8). So
// queries and keys go to bf16 without rounding, bf16 x bf16 products are exact in fp32, and
// mma.sync m16n8k16 accumulates them in fp32: the same products as the SIMT kernel, summed in
// another (fixed) order. The 16 keys of a tile are the M dimension, the (row, head) queries the N
// dimension (8 per n-tile, up to 4), the head dim the K dimension. The dot product does not care
// which dimension goes to which k slot as long as A and B agree, so each lane loads contiguous
// key bytes, 16 at a time (MmaKeyLoad): in a 64-dim chunk c, lane (g = lane / 4, t = lane % 4)
// loads L = 8 (bf16) or 16 (e4m3) consecutive dims of keys g and g + 8 per load, dims
// 64c + 4Lj + Lt + [0, L) (j < 64 / 4L: bf16 two loads, e4m3 one), so a warp instruction reads
// 8 keys x 64 contiguous bytes whatever the key type, and k-step s = (L / 4)j + h takes the
// lane's dims 64c + 4Lj + Lt + 4h + [0, 4) into its k slots {2t, 2t+1, 2t+8, 2t+9}. Queries sit
// in shared memory, converted, already in that fragment order, so a lane's B fragment is one
// conflict-free 8-byte load.
template <typename CacheT>
struct MmaKeyLoad {
  static constexpr int kLaneElems = 16 / static_cast<int>(sizeof(CacheT));  // L
  static constexpr int kLoads = 64 / (4 * kLaneElems);  // per 64-dim chunk and key row
};

__device__ __forceinline__ uint32_t raw_word(uint4 r, int i) {
  return i == 0 ? r.x : i == 1 ? r.y : i == 2 ? r.z : r.w;
}

// The 32-key e4m3 instances of the balanced grid at head dim 64 (kM = 2, CH = 1) stage their key
// tiles in a per-warp ring of kKeyRingStages tiles in dynamic shared memory, filled with
// cp.async: two 2 KB tiles stay in flight while a warp multiplies a third, without the registers
// of a third buffer. A lane copies and reads back only its own 16-byte words, stored lane-minor
// ([stage][word][lane]), so the reads are conflict-free and need no barrier: cp.async.wait_group
// makes a thread's own copies visible to it. The head-dim-64 balanced calls are faster with it; at
// head dim 128, whose register double buffer already keeps a 4 KB tile per warp in flight, the
// ring was slower, as were L2 prefetches of tiles ahead (bench/EXPERIMENTS.md:
// 2026-11-30-index-key-ring-ab, 2026-11-30-rejected-index-l2-tile-prefetch).
constexpr int kKeyRingStages = 3;
// uint4 words per lane per tile of 16 kM keys at head dim 64 CH (e4m3: one 16-byte load per
// 64-dim chunk and key row, two key rows per m-tile).
template <int CH, int kM>
constexpr int key_ring_words() {
  return kM * CH * 2;
}
template <int CH, int kM>
constexpr size_t key_ring_bytes() {
  return sizeof(uint4) * 32 * kScoreWarps * kKeyRingStages * key_ring_words<CH, kM>();
}
// Whether a scorer instance streams its keys through the key ring: the 32-key e4m3 balanced
// instances at head dim 64. score_mma and the launcher's shared-memory size both follow it.
template <typename CacheT, int CH, ScoreGrid kGrid, int kM>
constexpr bool uses_key_ring() {
  return std::is_same_v<CacheT, uint8_t> && kGrid == ScoreGrid::kBalanced && kM == 2 && CH == 1;
}
// Dynamic shared memory of the balanced-grid scorer instance <CacheT, CH, kM>.
template <typename CacheT, int CH, int kM>
constexpr size_t balanced_dynamic_smem() {
  return uses_key_ring<CacheT, CH, ScoreGrid::kBalanced, kM>() ? key_ring_bytes<CH, kM>() : 0;
}

// A fragment of k-step s (0-3) of a 64-dim chunk from its loads r[j][key g, key g + 8]: {row g
// slots 2t, 2t+1; row g+8 the same; row g slots 2t+8, 2t+9; row g+8 the same} = the lane's dims
// 4h + [0, 4) of its load j (see above). bf16 keys are used as stored; e4m3 pairs are converted
// to bf16, or to f16 on the f16 MMA path (kF16: e4m3 keys and queries).
template <typename CacheT, bool kF16>
__device__ __forceinline__ void a_fragment(const uint4 (&r)[MmaKeyLoad<CacheT>::kLoads][2], int s,
                                           uint32_t* a) {
  if constexpr (std::is_same_v<CacheT, __nv_bfloat16>) {
    static_assert(!kF16, "the f16 path is for e4m3 keys");
    const int j = s >> 1, h = s & 1;
    a[0] = raw_word(r[j][0], 2 * h);
    a[1] = raw_word(r[j][1], 2 * h);
    a[2] = raw_word(r[j][0], 2 * h + 1);
    a[3] = raw_word(r[j][1], 2 * h + 1);
  } else {
    const uint32_t w0 = raw_word(r[0][0], s);
    const uint32_t w1 = raw_word(r[0][1], s);
    if constexpr (kF16) {
      a[0] = e4m3x2_to_f16x2<false>(w0);
      a[1] = e4m3x2_to_f16x2<false>(w1);
      a[2] = e4m3x2_to_f16x2<true>(w0);
      a[3] = e4m3x2_to_f16x2<true>(w1);
    } else {
      a[0] = e4m3x2_to_bf16x2(w0);
      a[1] = e4m3x2_to_bf16x2(w1);
      a[2] = e4m3x2_to_bf16x2(w0 >> 16);
      a[3] = e4m3x2_to_bf16x2(w1 >> 16);
    }
  }
}

template <typename OutT>
__device__ __forceinline__ OutT round_to(float v) {
  if constexpr (std::is_same_v<OutT, __half>) {
    return __float2half_rn(v);
  } else {
    return __float2bfloat16_rn(v);
  }
}

// The nrh (row, head) query vectors of the segment starting at row0 -> q_s as bf16 (or f16, for
// e4m3 queries on the f16 path) MMA fragments, n-tiles padded with zero vectors. Element i = rh *
// Di + d goes to thread i % 256. Loads are issued 4 at a time before any is used (indices clamped
// into the segment, padding zeroed after), so a decode request's queries cost one round trip
// ("Issuing loads" in common.cuh).
template <typename QT, int CH, int kLaneElems, typename OutT>
__device__ __forceinline__ void fill_query_fragments(const IndexScoreParams& prm, int64_t row0,
                                                     int nrh, OutT* q_s) {
  static_assert(kLaneElems == 8 || kLaneElems == 16, "16-byte loads of bf16 or e4m3 keys");
  constexpr int kLog = kLaneElems == 8 ? 3 : 4;  // log2(L)
  constexpr int Di = CH * 64;
  constexpr int kBatch = 4;
  constexpr int kPerThread = kMaxScoreRowHeads * Di / kScoreThreads;
  const QT* q = static_cast<const QT*>(prm.index_q);
  const int H = prm.num_heads;
  const int n = (nrh + 7) / 8 * 8 * Di;
  for (int k0 = 0; k0 < kPerThread; k0 += kBatch) {
    if (static_cast<int>(threadIdx.x) + k0 * kScoreThreads >= n) break;
    // One round trip for the batch: the loads come first and the stores are predicated, not
    // branched (ptxas sank plain loads into the branches of a guarded store, one round trip
    // each; ld_raw_* and st_shared_b16_if in common.cuh).
    uint32_t raw[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int i = static_cast<int>(threadIdx.x) + (k0 + k) * kScoreThreads;
      const int rh = min(i / Di, nrh - 1), d = i % Di;
      const QT* e = q + (row0 + rh / H) * prm.q_stride_row + (rh % H) * prm.q_stride_head +
                    d * prm.q_stride_dim;
      if constexpr (sizeof(QT) == 1) {
        raw[k] = ld_raw_u8(e);
      } else {
        raw[k] = ld_raw_u16(e);
      }
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int i = static_cast<int>(threadIdx.x) + (k0 + k) * kScoreThreads;
      const int rh = i / Di, d = i % Di;
      float x;
      if constexpr (sizeof(QT) == 1) {
        x = to_float(static_cast<uint8_t>(raw[k]));
      } else {
        x = __uint_as_float(raw[k] << 16);  // bf16 -> fp32, exact
      }
      const float v = rh < nrh ? x : 0.0f;
      // d = 64c + 4Lj + Lt + w, w = 4h + e -> fragment (n-tile, c, s = (L / 4)j + h), lane
      // 4(rh % 8) + t, slot e (L = kLaneElems; the key layout above).
      const int c = d >> 6, dd = d & 63;
      const int s = ((dd >> (kLog + 2)) << (kLog - 2)) | ((dd >> 2) & (kLaneElems / 4 - 1));
      const int ln = (rh & 7) * 4 + ((dd >> kLog) & 3);
      uint16_t out_bits;
      if constexpr (std::is_same_v<OutT, __half>) {
        out_bits = __half_as_ushort(round_to<OutT>(v));
      } else {
        out_bits = __bfloat16_as_ushort(round_to<OutT>(v));
      }
      st_shared_b16_if(i < n, &q_s[((((rh >> 3) * CH + c) * 4 + s) * 32 + ln) * 4 + (dd & 3)],
                       out_bits);
    }
  }
}

// A warp's tile: 16 kM-key tile tin of block bl of the CTA's piece. Tiles step by kScoreWarps
// with 32-bit counters; offsets within a page are 32-bit (the launcher bounds block_size x key
// stride), so a tile's addresses cost one 64-bit page base.
struct TilePos {
  int bl, tin;
};
// The warp's next tile after p (tiles_per_block tiles per block).
__device__ __forceinline__ TilePos next_warp_tile(TilePos p, const int& tiles_per_block) {
  p.tin += kScoreWarps;
  while (p.tin >= tiles_per_block) {
    p.tin -= tiles_per_block;
    ++p.bl;
  }
  return p;
}

// A tile's key fragments: [m-tile][chunk][j][key 16m + g, key 16m + g + 8] (MmaKeyLoad).
template <typename CacheT, int CH, int kM>
struct KeyFrag {
  uint4 r[kM][CH][MmaKeyLoad<CacheT>::kLoads][2];
};

// The closures below take the scorer's values by reference, as the lambdas they replaced
// captured them (the scorer instances at the 128-register bound compile to other machine code
// for small changes in how values reach them; see bench/ab/sass_hash.py).

// A segment's key tiles: load fills a tile's key fragments, or returns false when the warp skips
// the tile (no row of the segment sees its keys: chunk-relative keys past key_limit; or its page
// id is bad: the block keeps score -inf). issue makes the same checks, then copies the tile into
// stage `stage` of the warp's key ring instead (key_ring_bytes). (One function for the checks
// of both changed the machine code of every scorer, which was not timed.)
template <typename CacheT, int CH, int kM, int kPieceBlocks>
struct KeyTileLoader {
  using Load = MmaKeyLoad<CacheT>;
  const IndexScoreParams& prm;
  const int& nblk;
  const int& bsi;
  const int& key_limit;
  const int32_t (&s_page)[kPieceBlocks];
  const int& lane;
  const CacheT* const& cache;
  const int& key_stride;
  const int& lane_key;

  __device__ __forceinline__ bool load(TilePos tp, KeyFrag<CacheT, CH, kM>& raw) const {
    if (tp.bl >= nblk) return false;
    const int in_block = tp.tin * 16 * kM;
    if (tp.bl * bsi + in_block > key_limit) return false;  // warp-uniform
    const int32_t page = s_page[tp.bl];
    if (page < 0 || page >= prm.num_cache_blocks) {
      if (lane == 0 && in_block == 0) raise_error(prm.error_flags, kDeviceErrorBlockId);
      return false;
    }
    const CacheT* kbase = cache + page * prm.cache_stride_page + (in_block * key_stride + lane_key);
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int c = 0; c < CH; ++c) {
#pragma unroll
        for (int j = 0; j < Load::kLoads; ++j) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            raw.r[m][c][j][r] = __ldg(reinterpret_cast<const uint4*>(
                kbase + (m * 16 + r * 8) * key_stride + c * 64 + j * 4 * Load::kLaneElems));
          }
        }
      }
    }
    return true;
  }

  __device__ __forceinline__ bool issue(TilePos tq, int stage, uint4* const& ring) const {
    constexpr int kWords = key_ring_words<CH, kM>();
    if (tq.bl >= nblk) return false;
    const int in_block = tq.tin * 16 * kM;
    if (tq.bl * bsi + in_block > key_limit) return false;  // warp-uniform
    const int32_t page = s_page[tq.bl];
    if (page < 0 || page >= prm.num_cache_blocks) {
      if (lane == 0 && in_block == 0) raise_error(prm.error_flags, kDeviceErrorBlockId);
      return false;
    }
    const CacheT* kbase = cache + page * prm.cache_stride_page + (in_block * key_stride + lane_key);
    uint4* dst = ring + stage * (kWords * 32);
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int c = 0; c < CH; ++c) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          cp_async_16(dst + ((m * CH + c) * 2 + r) * 32,
                      kbase + (m * 16 + r * 8) * key_stride + c * 64);
        }
      }
    }
    return true;
  }
};

// Chunk-relative key k of the lane's row g is seen by query 2t (2t + 1) of n-tile n iff
// k <= limit(n, 0) (limit(n, 1)); the lane's g is already subtracted, and the clamp to
// [-1, chunk keys] decides the same.
struct KeyLimit {
  const RowInfo& info;
  const int64_t& row0;
  const int& tq;
  const int& H;
  const int64_t& b0;
  const int64_t& bs;
  const int& nblk;
  const int& bsi;
  const int& g;

  __device__ __forceinline__ int operator()(int n, int q) const {
    const int64_t pos = info.pos_base + row0 + (n * 8 + 2 * tq + q) / H;
    return static_cast<int>(max(int64_t{-1}, min(pos - b0 * bs, int64_t{nblk} * bsi))) - g;
  }
};

// Scores the tile at p from its fragments into the block maxima: the MMAs over the head dim,
// then per query the tile's largest visible score, NaN taken as -1e30 (spec A12), reduced over
// the warp's key rows and folded into block_max with a shared-memory atomicMax. The one-n-tile
// instances keep the limits hoisted in lim; the four-n-tile ones recompute them per tile (eight
// more live registers made the bf16 ones spill, bench/EXPERIMENTS.md:
// 2026-11-30-index-loop-pingpong-ab).
template <typename CacheT, int CH, bool kF16, int kNTiles, int kM, int kMaxBlockHeads>
struct KeyTileScorer {
  static constexpr bool kHoistLimits = kNTiles == 1;
  const uint2* const& q_frag;
  const int& lane;
  const int& ntq;
  const int& nrh;
  const int (&lim)[kNTiles][2];
  const KeyLimit& limit;
  const int& g;
  const int& tq;
  const int& bsi;
  uint32_t (&block_max)[kMaxBlockHeads];

  __device__ __forceinline__ void operator()(TilePos p, const KeyFrag<CacheT, CH, kM>& raw) const {
    float acc[kM][kNTiles][4];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.0f;
      }
    }
#pragma unroll
    for (int c = 0; c < CH; ++c) {
#pragma unroll
      for (int s = 0; s < 4; ++s) {
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          uint32_t a[4];
          a_fragment<CacheT, kF16>(raw.r[m][c], s, a);
#pragma unroll
          for (int n = 0; n < kNTiles; ++n) {
            if (kNTiles == 1 || n < ntq) {  // warp-uniform; a segment has at least one n-tile
              mma_m16n8k16<kF16>(acc[m][n], a, q_frag[((n * CH + c) * 4 + s) * 32 + lane]);
            }
          }
        }
      }
    }
    // acc[m][n] = {key 16m+g x query 2t, key 16m+g x query 2t+1, key 16m+g+8 x query 2t,
    // key 16m+g+8 x 2t+1}; the m-tiles' maxima are taken before the shuffles.
    const int kr = p.bl * bsi + p.tin * 16 * kM;  // the tile's first key, chunk-relative
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      if (n >= ntq) break;
      const int rh0 = n * 8 + 2 * tq;
      float m0 = -INFINITY, m1 = -INFINITY;
#pragma unroll
      for (int m = 0; m < kM; ++m) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = acc[m][n][e];
          if (isnan(v)) v = -1e30f;    // spec A12
          const int km = kr + 16 * m;  // the m-tile's first key
          const int k = e < 2 ? km : km + 8;
          if ((e & 1) == 0) {
            if (k <= (kHoistLimits ? lim[n][0] : limit(n, 0))) m0 = fmaxf(m0, v);
          } else {
            if (k <= (kHoistLimits ? lim[n][1] : limit(n, 1))) m1 = fmaxf(m1, v);
          }
        }
      }
#pragma unroll
      for (int off = 4; off < 32; off <<= 1) {
        m0 = fmaxf(m0, __shfl_xor_sync(0xFFFFFFFFu, m0, off));
        m1 = fmaxf(m1, __shfl_xor_sync(0xFFFFFFFFu, m1, off));
      }
      if (g == 0) {
        if (rh0 < nrh) atomicMax(&block_max[p.bl * nrh + rh0], ordered_f32(m0));
        if (rh0 + 1 < nrh) atomicMax(&block_max[p.bl * nrh + rh0 + 1], ordered_f32(m1));
      }
    }
  }
};

// The queries of a segment (rows row0.., nrh row-heads) as MMA fragments in q_s
// (fill_query_fragments of the query dtype: e4m3 on the f16 path, the launcher's rule).
template <typename CacheT, int CH, bool kF16, typename QElem, int kQElems>
struct QueryFiller {
  using Load = MmaKeyLoad<CacheT>;
  const IndexScoreParams& prm;
  QElem (&q_s)[kQElems];

  __device__ __forceinline__ void operator()(int64_t row0, int nrh) const {
    if constexpr (kF16) {
      // e4m3 queries (the launcher's rule)
      fill_query_fragments<uint8_t, CH, Load::kLaneElems>(prm, row0, nrh, q_s);
    } else if (prm.q_dtype == DType::kBF16) {
      fill_query_fragments<__nv_bfloat16, CH, Load::kLaneElems>(prm, row0, nrh, q_s);
    } else {
      fill_query_fragments<uint8_t, CH, Load::kLaneElems>(prm, row0, nrh, q_s);
    }
  }
};

// Scores blocks [b0, b0 + bpc) of row tile `tile` (bpc <= the piece's block capacity) into the
// block maxima, segment by segment (rows of one request); `report`: this CTA reports the tile's
// bad lengths (the one that scores its first block). The scorer's values by reference, as the
// score_piece lambda it replaced captured them.
template <typename CacheT, int CH, bool kF16, ScoreGrid kGrid, int kNTiles, int kM,
          int kMaxPieceBlocks, typename QElem, int kQElems>
struct PieceScorer {
  static constexpr bool kClusterSelect = kGrid == ScoreGrid::kClusterSelect;
  static constexpr bool kKeyRing = uses_key_ring<CacheT, CH, kGrid, kM>();
  using Load = MmaKeyLoad<CacheT>;
  const IndexScoreParams& prm;
  const int64_t& T;
  const int& H;
  const int64_t& bs;
  const int64_t& max_blocks;
  int32_t (&s_page)[kMaxPieceBlocks];
  uint32_t (&block_max)[detail::kIndexScoreMaxBlockHeads];
  const QueryFiller<CacheT, CH, kF16, QElem, kQElems>& fill_queries;
  const int& lane;
  const int& warp;
  const int& g;
  const int& tq;
  const int& tiles_per_block;
  const CacheT* const& cache;
  const int& key_stride;
  const int& lane_key;
  const uint2* const& q_frag;

  __device__ __forceinline__ void operator()(int64_t tile, int64_t b0, int bpc, bool report) const {
    const int64_t tile_start = tile * prm.rows_per_tile;
    const int64_t tile_end = min(T, tile_start + prm.rows_per_tile);
    // Decode: the tile is request `tile` with all of its rows, known without reading seq_lens,
    // so its queries and this CTA's page ids (in bounds of the block-table row whatever the
    // length) are loaded while the seq_lens load is in flight: one round trip instead of two.
    // The one-query-tile instances load the length with them (ld_decode_seq_len); in the
    // four-tile ones, at their 128-register bound, that register live across the segment loop
    // made the bf16 head-dim-128 scorer spill inside its tile loop, so they read it in the loop.
    const bool early = prm.rows.cu_seqlens_q == nullptr && tile < prm.rows.num_requests;
    uint32_t early_seq_len = 0;
    if (early) {
      if constexpr (kNTiles == 1) early_seq_len = ld_decode_seq_len(prm.rows, tile_start);
      const int64_t b = b0 + threadIdx.x;
      int32_t page = 0;
      const bool has_page = static_cast<int>(threadIdx.x) < bpc && b < max_blocks;
      if (has_page) page = prm.block_table[tile * prm.bt_stride_req + b * prm.bt_stride_block];
      fill_queries(tile_start, static_cast<int>(tile_end - tile_start) * H);
      if (has_page) s_page[threadIdx.x] = page;
    }
    // Here rather than once per CTA, so the static kernels keep their instruction order; the
    // balanced grid (decode) has no cu_seqlens_q, so its repeats return at once.
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
      check_cu_seqlens(prm.rows, prm.error_flags);
    }
    for (int64_t row0 = tile_start; row0 < tile_end;) {
      int32_t* const flags = (threadIdx.x == 0 && report) ? prm.error_flags : nullptr;
      const RowInfo info = early && kNTiles == 1 ? resolve_row(prm.rows, row0, flags, early_seq_len)
                                                 : resolve_row(prm.rows, row0, flags);
      const int64_t row1 = min(info.seg_end, tile_end);
      const int64_t max_pos = info.pos_base + row1 - 1;  // the segment's last row sees the most
      if (info.req < 0 || max_pos < b0 * bs) {
        row0 = row1;
        continue;
      }
      const int nrh = static_cast<int>(row1 - row0) * H;
      const int ntq = (nrh + 7) / 8;  // n-tiles of 8 query vectors (the padding ones are zero)
      const int nblk = static_cast<int>(min(b0 + bpc, max_pos / bs + 1) - b0);

      __syncthreads();  // the previous segment is done with q_s and block_max
      if (!early) {
        fill_queries(row0, nrh);
        for (int i = threadIdx.x; i < nblk; i += kScoreThreads) {
          s_page[i] =
              prm.block_table[info.req * prm.bt_stride_req + (b0 + i) * prm.bt_stride_block];
        }
      }
      clear_block_maxima(block_max, nblk * nrh);
      __syncthreads();

      // Chunk-relative keys past key_limit are seen by no row (a chunk's keys fit in 32 bits).
      const int bsi = static_cast<int>(bs);
      const int key_limit = static_cast<int>(min(max_pos - b0 * bs, int64_t{nblk} * bsi));
      using Frag = KeyFrag<CacheT, CH, kM>;
      const KeyTileLoader<CacheT, CH, kM, kMaxPieceBlocks> tiles{
          prm, nblk, bsi, key_limit, s_page, lane, cache, key_stride, lane_key};
      TilePos tp{warp / tiles_per_block, warp % tiles_per_block};
      Frag fa;
      bool have = false;
      // The static and in-cluster grids issue the warp's first tile before computing the
      // visibility limits; the balanced grid computes the limits first, which was faster for its
      // head-dim-128 e4m3 instances (bench/EXPERIMENTS.md: 2026-11-30-index-bf16-balanced-ab,
      // variant H; the 32-key-tile instance that replaced them was timed with it).
      if constexpr (kGrid != ScoreGrid::kBalanced) have = tiles.load(tp, fa);
      // The visibility limits (KeyLimit), hoisted into lim by the one-n-tile instances
      // (KeyTileScorer).
      constexpr bool kHoistLimits = kNTiles == 1;
      const KeyLimit limit{info, row0, tq, H, b0, bs, nblk, bsi, g};
      int lim[kNTiles][2];
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
        for (int q = 0; q < 2; ++q) lim[n][q] = kHoistLimits ? limit(n, q) : 0;
      }
      if constexpr (kGrid == ScoreGrid::kBalanced && !kKeyRing) have = tiles.load(tp, fa);
      const KeyTileScorer<CacheT, CH, kF16, kNTiles, kM, detail::kIndexScoreMaxBlockHeads>
          score_tile{q_frag, lane, ntq, nrh, lim, limit, g, tq, bsi, block_max};
      if constexpr (kKeyRing) {
        // The ring (key_ring_bytes): tile i sits in stage i % kKeyRingStages; each iteration
        // first issues the tile kKeyRingStages - 1 ahead into the stage of tile i - 1 (read into
        // registers last iteration), then waits for tile i. Every iteration commits one group,
        // empty when its tile is skipped, so "all but the newest kKeyRingStages - 1 groups" is
        // always tile i.
        extern __shared__ uint4 key_ring[];
        constexpr int kWords = key_ring_words<CH, kM>();
        uint4* ring = key_ring + warp * (kKeyRingStages * kWords * 32) + lane;
        uint32_t have_mask = 0;  // bit s: the tile in stage s is being copied
        TilePos tq = tp;
#pragma unroll
        for (int st = 0; st < kKeyRingStages - 1; ++st) {
          if (tiles.issue(tq, st, ring)) have_mask |= 1u << st;
          cp_async_commit();
          tq = next_warp_tile(tq, tiles_per_block);
        }
        int stage = 0;
        while (tp.bl < nblk) {
          const int ahead = stage == 0 ? kKeyRingStages - 1 : stage - 1;
          have_mask &= ~(1u << ahead);
          if (tiles.issue(tq, ahead, ring)) have_mask |= 1u << ahead;
          cp_async_commit();
          tq = next_warp_tile(tq, tiles_per_block);
          cp_async_wait<kKeyRingStages - 1>();
          if ((have_mask >> stage) & 1u) {
            Frag raw;
            const uint4* src = ring + stage * (kWords * 32);
#pragma unroll
            for (int m = 0; m < kM; ++m) {
#pragma unroll
              for (int c = 0; c < CH; ++c) {
#pragma unroll
                for (int r = 0; r < 2; ++r) raw.r[m][c][0][r] = src[((m * CH + c) * 2 + r) * 32];
              }
            }
            score_tile(tp, raw);
          }
          tp = next_warp_tile(tp, tiles_per_block);
          stage = stage == kKeyRingStages - 1 ? 0 : stage + 1;
        }
        cp_async_wait<0>();  // the next piece refills the ring from stage 0
      } else if constexpr (kGrid == ScoreGrid::kBalanced) {
        // Two named buffers that swap roles every tile (the loop is unrolled by two), so the
        // double buffer costs no register copies. The balanced grid runs it (with bf16 keys the
        // copying loop spills there); the static and in-cluster kernels were faster with the
        // copying loop below (bench/EXPERIMENTS.md: 2026-11-30-index-loop-pingpong-ab), the static
        // 32-key instance too (2026-11-30-index-m2-tiles-ab, call 4).
        Frag fb;
        while (tp.bl < nblk) {
          TilePos tn = next_warp_tile(tp, tiles_per_block);
          bool have_next = tiles.load(tn, fb);
          if (have) score_tile(tp, fa);
          tp = tn;
          have = have_next;
          if (tp.bl >= nblk) break;
          tn = next_warp_tile(tp, tiles_per_block);
          have_next = tiles.load(tn, fa);
          if (have) score_tile(tp, fb);
          tp = tn;
          have = have_next;
        }
      } else {
        while (tp.bl < nblk) {
          Frag next;
          const TilePos tp_next = next_warp_tile(tp, tiles_per_block);
          const bool have_next = tiles.load(tp_next, next);
          if (have) score_tile(tp, fa);
          have = have_next;
          fa = next;
          tp = tp_next;
        }
      }
      __syncthreads();
      // In-cluster selection (decode: one segment) reads the block maxima where they are.
      if constexpr (!kClusterSelect) {
        allow_dependent_launch();  // the select kernel may start; it waits for the writes below
        write_block_maxima(prm, block_max, info, row0, b0, nblk, nrh, H, bs, T, max_blocks);
      }
      row0 = row1;
    }
  }
};

// Same decomposition as index_score_kernel (CTA = row tile x chunk of blocks, block maxima via
// shared-memory atomicMax over ordered floats), or with kGrid == kBalanced a share of all
// requests' blocks; a warp scores tiles of 16 kM keys with mma.sync.
// CH = head_dim / 64. kF16: e4m3 keys and e4m3 queries, multiplied as f16 (exact like bf16;
// e4m3 -> f16 is one instruction per pair, e4m3 -> bf16 a detour through f32).
// kGrid == kClusterSelect: selects in-cluster into *sel (cluster_select_topk) instead of writing
// scores.
// kNTiles: n-tiles of 8 query vectors held per segment (kMaxScoreRowHeads / 8, or 1 for the
// launcher's decode instances, which do without the unrolled code and registers of three unused
// accumulator tiles).
// kM: 16-key m-tiles per warp tile (block_size a multiple of 16 kM). With kM = 2 the tile's
// epilogue (NaN filter, visibility, shuffles, shared atomics), its address arithmetic and its
// query-fragment loads serve twice the keys: the head-dim-128 e4m3 instance issues ~130
// instructions per 16 keys instead of ~190.
template <typename CacheT, int CH, bool kF16, ScoreGrid kGrid, int kNTiles, int kM = 1>
__device__ __forceinline__ void score_mma(const IndexScoreParams& prm,
                                          const IndexSelectParams* sel) {
  constexpr bool kClusterSelect = kGrid == ScoreGrid::kClusterSelect;
  constexpr bool kKeyRing = uses_key_ring<CacheT, CH, kGrid, kM>();
  static_assert(!kF16 || std::is_same_v<CacheT, uint8_t>, "the f16 path is for e4m3 keys");
  static_assert(kNTiles >= 1 && kNTiles * 8 <= kMaxScoreRowHeads, "n-tiles per segment");
  using Load = MmaKeyLoad<CacheT>;
  static_assert(!kKeyRing || Load::kLoads == 1, "the key ring holds one e4m3 load per chunk");
  using QElem = std::conditional_t<kF16, __half, __nv_bfloat16>;
  static_assert(kMaxScoreBlocks * kMaxScoreRowHeads == detail::kIndexScoreMaxBlockHeads,
                "the balanced pieces fit the block maxima");
  static_assert(detail::kIndexBalancedMaxPieceBlocks <= kScoreThreads,
                "a piece's page ids take one load per thread");
  // The balanced grid's pieces (detail::balanced_piece_blocks) own up to 256 blocks, a static
  // CTA up to kMaxScoreBlocks; either way blocks x row-heads <= kIndexScoreMaxBlockHeads.
  constexpr int kMaxPieceBlocks =
      kGrid == ScoreGrid::kBalanced ? detail::kIndexBalancedMaxPieceBlocks : kMaxScoreBlocks;
  __shared__ __align__(16) QElem q_s[kNTiles * 8 * kMaxIndexDim];
  __shared__ uint32_t block_max[detail::kIndexScoreMaxBlockHeads];
  __shared__ int32_t s_page[kMaxPieceBlocks];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, tq = lane & 3;
  const int H = prm.num_heads;
  const int64_t bs = prm.rows.block_size;
  const int64_t T = prm.rows.num_rows;
  const int64_t max_blocks = prm.rows.max_blocks;
  const int tiles_per_block = static_cast<int>(bs / (16 * kM));
  const CacheT* cache = static_cast<const CacheT*>(prm.cache);
  const int key_stride = static_cast<int>(prm.cache_stride_key);
  const int lane_key = g * key_stride + tq * Load::kLaneElems;  // from a tile's first key
  const uint2* q_frag = reinterpret_cast<const uint2*>(q_s);

  const QueryFiller<CacheT, CH, kF16, QElem, kNTiles * 8 * kMaxIndexDim> fill_queries{prm, q_s};
  const PieceScorer<CacheT, CH, kF16, kGrid, kNTiles, kM, kMaxPieceBlocks, QElem,
                    kNTiles * 8 * kMaxIndexDim>
      score_piece{prm,          T,        H,     bs, max_blocks, s_page,          block_max,
                  fill_queries, lane,     warp,  g,  tq,         tiles_per_block, cache,
                  key_stride,   lane_key, q_frag};
  if constexpr (kGrid == ScoreGrid::kBalanced) {
    // The CTA's share of the concatenated visible blocks of all requests (decode: a row tile is a
    // request): every CTA reads all lengths, takes the prefix sum of their units (lead units and
    // at least one block per request, detail::balanced_units) and scores its share request by
    // request, in pieces of at most detail::balanced_piece_blocks. A ragged batch then keeps every
    // SM streaming until the end instead of leaving the CTAs of short requests idle, and a share
    // that reaches into another request holds fewer blocks for the restart that costs it.
    __shared__ int32_t s_units_end[detail::kIndexBalancedMaxRequests];  // inclusive prefix sums
    __shared__ int32_t s_warp_units[kScoreWarps];
    constexpr int kPer = static_cast<int>(detail::kIndexBalancedMaxRequests) / kScoreThreads;
    const int nreq = prm.rows.num_requests;  // <= kIndexBalancedMaxRequests (the plan's bound)
    int32_t len[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {  // all loads issued before any is used
      const int r = min(static_cast<int>(threadIdx.x) * kPer + i, nreq - 1);
      len[i] = __ldg(prm.rows.seq_lens + r * prm.rows.seq_lens_stride);
    }
    int32_t run = 0;
    int32_t incl_units[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (static_cast<int>(threadIdx.x) * kPer + i < nreq) {
        run +=
            static_cast<int32_t>(detail::balanced_units(len[i], bs, max_blocks, prm.balanced_lead));
      }
      incl_units[i] = run;
    }
    int32_t incl = run;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int32_t v = __shfl_up_sync(0xFFFFFFFFu, incl, off);
      if (lane >= off) incl += v;
    }
    if (lane == 31) s_warp_units[warp] = incl;
    __syncthreads();
    int32_t before = incl - run, total = 0;
#pragma unroll
    for (int w = 0; w < kScoreWarps; ++w) {
      const int32_t t = s_warp_units[w];
      if (w < warp) before += t;
      total += t;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int r = static_cast<int>(threadIdx.x) * kPer + i;
      if (r < nreq) s_units_end[r] = before + incl_units[i];
    }
    __syncthreads();
    const detail::BlockRange share = detail::balanced_share(total, gridDim.y, blockIdx.y);
    detail::BalancedCursor at = detail::balanced_first(s_units_end, nreq, share, prm.balanced_lead);
    const int32_t piece_blocks = detail::balanced_piece_blocks(int64_t{prm.rows_per_tile} * H);
    int32_t bpc = 0;
    detail::BalancedCursor next;
    while (detail::balanced_piece(s_units_end, nreq, share, piece_blocks, prm.balanced_lead, at,
                                  &bpc, &next)) {
      score_piece(at.tile, at.b0, bpc, at.b0 == 0);
      at = next;
    }
  } else {
    score_piece(blockIdx.x, static_cast<int64_t>(blockIdx.y) * prm.blocks_per_cta,
                prm.blocks_per_cta, blockIdx.y == 0);
  }
  if constexpr (kClusterSelect) {
    __shared__ SelectSmem s_select;
    cluster_select_topk(prm, *sel, block_max, s_select);
  }
}

template <typename CacheT, int CH, bool kF16, int kNTiles, int kM = 1>
__global__ void __launch_bounds__(kScoreThreads, 2)
    index_score_mma_kernel(const IndexScoreParams prm) {
  if (prm.early_select) allow_dependent_launch();
  score_mma<CacheT, CH, kF16, ScoreGrid::kStatic, kNTiles, kM>(prm, nullptr);
}

// The balanced decode grid (IndexLaunchPlan::balanced_ctas CTAs in grid.y); kM as in score_mma.
template <typename CacheT, int CH, bool kF16, int kNTiles, int kM>
__global__ void __launch_bounds__(kScoreThreads, 2)
    index_score_mma_balanced_kernel(const IndexScoreParams prm) {
  score_mma<CacheT, CH, kF16, ScoreGrid::kBalanced, kNTiles, kM>(prm, nullptr);
}

// The decode variant whose grid's chunks of a request (grid.y) are one thread-block cluster that
// selects the request's top-k into `sel` (sel.scores unused) instead of writing prm.scores.
template <typename CacheT, int CH, bool kF16, int kNTiles>
__global__ void __launch_bounds__(kScoreThreads, 2)
    index_score_mma_cluster_kernel(const IndexScoreParams prm, const IndexSelectParams sel) {
  score_mma<CacheT, CH, kF16, ScoreGrid::kClusterSelect, kNTiles>(prm, &sel);
}

}  // namespace cuda
}  // namespace msa
