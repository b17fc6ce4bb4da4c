// Prefill index scores on Hopper tensor cores: for each query row (token x index head) and each
// scored block of its request, the block maximum of spec A2 (max over the block's visible keys of
// <index_q, index_k>, fp32, NaN -> -1e30), written to the [H, T, max_blocks] buffer that the
// select kernel ranks. The T x S score matrix itself never leaves the registers.
//
// One CTA = one query tile (128 rows: 128 / H consecutive tokens of one request, aligned so that
// they share their own block; prefill/tiles.cuh) x one chunk of up to `pages_per_cta` blocks.
// Producer warpgroups fill a ring of kStages 16-bit key tiles (one 128 x 128 tile per block),
// by one of three key paths (IndexKeys):
//   kBF16      bf16 keys, one producer warpgroup's bulk tensor copies straight into the ring;
//   kE4M3      e4m3 keys converted per tile: two producer warpgroups, each taking every other
//              block by bulk tensor copies into two staging buffers of its own, which its 128
//              threads convert exactly to f16 into the ring (with one warpgroup converting, the
//              consumers waited for it);
//   kE4M3Copy  e4m3 keys converted once per call: copy_index_keys_f16_kernel writes every page
//              of the call's requests exactly as f16 into a workspace copy ([request x block]
//              pages), which the kBF16 producer copies into the ring. Every 128-row tile of a
//              request reads the same pages, so a long prompt converts each page once instead
//              of once per tile; the copy path is chosen by shape (index_keys_copy_bytes).
// The ring's f16 tiles of both e4m3 paths are the same bits, and so are the products and scores.
// The two consumer warpgroups own rows 0-63 and 64-127, hold their queries in shared memory (e4m3
// queries converted to f16 likewise), and for each block run the 64 x 128 x 128 product (wgmma,
// bf16 or f16 operands, fp32 accumulation) into one of two accumulator sets, so the product of
// block i + 1 runs on the tensor cores while the block maxima of block i are reduced (a max over
// each thread's 32 values of a row, then over the row's four threads) and stored. e4m3 operands
// go through f16 rather than fp8 wgmma because spec A2 asks for fp32 accumulation of exactly
// up-converted operands, and fp8 wgmma's accumulator keeps fewer bits (enough to exchange
// near-tied blocks of realistic scores).
//
// Blocks a row's top-k takes whatever their score (init blocks below init_blocks, and the own
// block and those before it within local_blocks) are not scored: the select kernel ranks them by
// tier alone. Every other block of the tile's visible range is scored for every live row, so the
// select kernel reads only written entries. A page id outside the cache raises
// kDeviceErrorBlockId and the block scores -inf for the tile's rows (the key copy skips it).
#pragma once

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

constexpr int kIndexRows = 128;  // rows per tile
constexpr int kIndexDim = 128;   // index head dim
constexpr int kIndexKeys = 128;  // keys per block

enum class IndexKeys { kBF16, kE4M3, kE4M3Copy };

template <IndexKeys kKeys>
struct IndexScoreConfig {
  static constexpr bool kF16 = kKeys != IndexKeys::kBF16;         // e4m3 queries, f16 MMAs
  static constexpr bool kStagedKeys = kKeys == IndexKeys::kE4M3;  // producers convert keys
  static constexpr int kQElemBytes = kF16 ? 1 : 2;                // index_q as given
  static constexpr int kTileBytes = kIndexKeys * kIndexDim * 2;   // one block's 16-bit keys
  static constexpr int kStagedBytes = kIndexKeys * kIndexDim;     // one block's e4m3 keys
  static constexpr int kQBytes = kIndexRows * kIndexDim * 2;
  static constexpr int kStages = 4;  // even: ring stage i % kStages holds blocks of one producer
  static constexpr int kProducers = kStagedKeys ? 2 : 1;  // producer warpgroups
  static constexpr int kThreads = 128 * (kProducers + 2);
  static constexpr int kStaged = kStagedKeys ? 2 * kProducers : 0;  // two staging buffers each
  // Registers after setmaxnreg: producers 40, consumers what the 64K-register file leaves.
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = kStagedKeys ? 216 : 232;
  static_assert(kProducers * kProducerRegs + 2 * kConsumerRegs <= 512, "register file");
  static constexpr int kMaxPages = 64;  // pages_per_cta upper bound
  static constexpr int kSmemBytes = kQBytes + kStages * kTileBytes + kStaged * kStagedBytes +
                                    1024 /* barriers, pages */ + 1024 /* alignment slack */;
};

struct IndexScoreParams {
  RowMap rows;
  const int32_t* tile_offsets;  // the plan's offsets [num_requests + 2]
  const void* index_q;          // [T, H, 128], 16-byte aligned rows
  int64_t q_stride_row, q_stride_head;
  const int32_t* block_table;  // [num_requests, max_blocks] index-cache pages
  int64_t bt_stride_req, bt_stride_block;
  int64_t num_cache_blocks;
  float* scores;  // [H, T, max_blocks]
  int32_t num_heads;
  int32_t tile_tokens;  // 128 / H
  int32_t pages_per_cta;
  int32_t init_blocks, local_blocks;
  int32_t* error_flags;
  // kE4M3Copy: the producer reads block b of request r at page r * max_blocks + b of the copy
  // (its tensor map); the page id in the block table is still checked.
  bool keys_copied;
};

// The per-call f16 copy of a prefill call's e4m3 index keys: page r * max_blocks + b holds block
// b of request r (b below ceil(seq_len / 128)), 128 keys x 128 dims, row-major.
struct IndexKeyCopyParams {
  RowMap rows;
  const uint8_t* cache;  // [num_blocks, 128, 128] e4m3, 16-byte aligned keys
  int64_t cache_stride_page, cache_stride_key;
  int64_t num_cache_blocks;
  const int32_t* block_table;
  int64_t bt_stride_req, bt_stride_block;
  uint8_t* copy;  // [num_requests * max_blocks, 128, 128] f16
};

struct IndexSmem {
  uint64_t full[4];
  uint64_t empty[4];
  uint64_t staged[4];  // e4m3: a staging buffer's bulk copy landed
  int32_t pages[64];
};

// Stores 16 e4m3 values (dims 16 c .. 16 c + 15 of row r) as f16, exactly, into the swizzled
// K-major 16-bit tile `dst` of `rows` rows (two panels of 64 dims).
__device__ __forceinline__ void store_e4m3x16_as_f16(uint8_t* dst, int rows, int r, int c,
                                                     uint4 v) {
  uint4 lo, hi;
  e4m3x16_to_f16(v, lo, hi);
  uint8_t* panel = dst + (c / 4) * (rows * 128);
  const auto row = static_cast<uint32_t>(r), ch = static_cast<uint32_t>(2 * (c % 4));
  *reinterpret_cast<uint4*>(panel + sm90::swizzled_chunk(row, ch)) = lo;
  *reinterpret_cast<uint4*>(panel + sm90::swizzled_chunk(row, ch + 1)) = hi;
}

// The producer warpgroup's conversion of one staged e4m3 key tile (128 rows of 128 bytes, as the
// 128-byte-swizzled bulk copy left it) into the ring's f16 tile.
__device__ __forceinline__ void convert_staged_keys(const uint8_t* staged, uint8_t* dst, int t) {
#pragma unroll 4
  for (int c = t; c < kIndexKeys * 8; c += 128) {
    const int r = c / 8, chunk = c % 8;
    const uint4 v = *reinterpret_cast<const uint4*>(
        staged + sm90::swizzled_chunk(static_cast<uint32_t>(r), static_cast<uint32_t>(chunk)));
    store_e4m3x16_as_f16(dst, kIndexKeys, r, chunk, v);
  }
}

// A store under a predicate (no branch around it).
__device__ __forceinline__ void st_global_if(float* p, float v, bool pred) {
  asm volatile("{\n.reg .pred q;\nsetp.ne.b32 q, %2, 0;\n@q st.global.f32 [%0], %1;\n}" ::"l"(p),
               "f"(v), "r"(static_cast<int>(pred))
               : "memory");
}

// Block maxima of one accumulator set: rows r0 = acc_row(t, 0) and r0 + 8 of the warpgroup's 64,
// NaN taken as -1e30 (spec A12). kMasked: columns above lim0 (lim1) are not visible to row r0
// (r0 + 8), the own block's keys past the row's position; other blocks pass kMasked false and
// every column counts. fmaxf skips NaN operands, so the maximum runs over the other values and a
// NaN only raises it to -1e30 at the end: two instructions per value (a max and a NaN test that
// ORs into a predicate) where substituting -1e30 before the max took two more, and the column
// test two more again. Branch-free, so that no divergent path separates the next block's MMAs
// from their wait (ptxas would serialise them).
template <bool kMasked>
__device__ __forceinline__ void block_max_rows(const float (&acc)[64], int t, int lim0, int lim1,
                                               float& m0, float& m1) {
  m0 = -INFINITY;
  m1 = -INFINITY;
  bool nan0 = false, nan1 = false;
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    const float v = acc[i];
    const int col = sm90::acc_col(t, i);
    if ((i & 2) == 0) {
      if (!kMasked || col <= lim0) {
        m0 = fmaxf(m0, v);
        nan0 = nan0 || isnan(v);
      }
    } else {
      if (!kMasked || col <= lim1) {
        m1 = fmaxf(m1, v);
        nan1 = nan1 || isnan(v);
      }
    }
  }
  if (nan0) m0 = fmaxf(m0, -1e30f);
  if (nan1) m1 = fmaxf(m1, -1e30f);
  m0 = fmaxf(m0, __shfl_xor_sync(0xFFFFFFFFu, m0, 1));
  m0 = fmaxf(m0, __shfl_xor_sync(0xFFFFFFFFu, m0, 2));
  m1 = fmaxf(m1, __shfl_xor_sync(0xFFFFFFFFu, m1, 1));
  m1 = fmaxf(m1, __shfl_xor_sync(0xFFFFFFFFu, m1, 2));
}

template <bool kF16>
__device__ __forceinline__ void issue_block_mma(uint32_t q_addr, uint32_t k_addr,
                                                float (&acc)[64]) {
  constexpr sm90::Mma16 kType = kF16 ? sm90::Mma16::kF16 : sm90::Mma16::kBF16;
  sm90::mma_begin();
#pragma unroll
  for (int kk = 0; kk < kIndexDim / 16; ++kk) {
    sm90::mma_ss<kType, false>(sm90::kmajor16_desc(q_addr, kIndexRows, kk),
                               sm90::kmajor16_desc(k_addr, kIndexKeys, kk), acc,
                               kk == 0 ? sm90::gmma::ScaleOut::Zero : sm90::gmma::ScaleOut::One);
  }
  sm90::mma_commit();
}

// The key copy of kE4M3Copy (IndexKeyCopyParams): one CTA per page at a time, each thread
// converting 16-byte chunks of keys exactly to f16. Blocks at or past a request's length and
// page ids outside the cache are skipped (the scorer flags the latter and never reads the former).
constexpr int kKeyCopyThreads = 256;

__global__ void __launch_bounds__(kKeyCopyThreads)
    copy_index_keys_f16_kernel(const IndexKeyCopyParams p) {
  const int64_t units = static_cast<int64_t>(p.rows.num_requests) * p.rows.max_blocks;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int32_t page = copy_unit_page(p.rows, p.block_table, p.bt_stride_req, p.bt_stride_block,
                                        p.num_cache_blocks, u);
    if (page < 0) continue;
    const uint8_t* src = p.cache + page * p.cache_stride_page;
    uint8_t* dst = p.copy + u * (kIndexKeys * kIndexDim * 2);
    for (int c = static_cast<int>(threadIdx.x); c < kIndexKeys * kIndexDim / 16;
         c += kKeyCopyThreads) {
      const int key = c / (kIndexDim / 16), chunk = c % (kIndexDim / 16);
      auto* out = reinterpret_cast<uint4*>(dst + key * (kIndexDim * 2) + chunk * 32);
      e4m3x16_to_f16(ld_raw_v4(src + key * p.cache_stride_key + chunk * 16), out[0], out[1]);
    }
  }
}

template <IndexKeys kKeys>
__global__ void __launch_bounds__(IndexScoreConfig<kKeys>::kThreads, 1)
    index_scores_sm90_kernel(const __grid_constant__ CUtensorMap key_map,
                             const IndexScoreParams p) {
  using Cfg = IndexScoreConfig<kKeys>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = sm90::align_dynamic_smem(smem_raw);
  uint8_t* sQ = smem;
  uint8_t* sK = smem + Cfg::kQBytes;
  uint8_t* sStaged = sK + Cfg::kStages * Cfg::kTileBytes;
  auto* ss = reinterpret_cast<IndexSmem*>(sStaged + Cfg::kStaged * Cfg::kStagedBytes);

  const int32_t nreq = p.rows.num_requests;
  const int32_t total = p.tile_offsets[nreq];
  const int32_t tile_index = total - 1 - static_cast<int32_t>(blockIdx.x);
  if (tile_index < 0) return;
  const Tile tile = find_tile(p.rows, p.tile_offsets, tile_index, p.tile_tokens);
  const int64_t bs = kIndexKeys;
  const int64_t own = (tile.hi - 1) / bs;
  const int64_t b_begin =
      max(static_cast<int64_t>(blockIdx.y) * p.pages_per_cta, static_cast<int64_t>(p.init_blocks));
  const int64_t b_end =
      min(static_cast<int64_t>(blockIdx.y + 1) * p.pages_per_cta, own + 1 - p.local_blocks);
  if (b_begin >= b_end) return;
  // Loop bounds as warp-uniform values (a broadcast), so ptxas sees the consumers' loop branches
  // as uniform and keeps MMAs in flight across them.
  const int npages = __shfl_sync(0xFFFFFFFFu, static_cast<int>(b_end - b_begin), 0);

  const int tid = threadIdx.x;
  const int wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      sm90::barrier_init(&ss->full[s], 1);
      sm90::barrier_init(&ss->empty[s], 256);  // every consumer thread arrives
    }
    for (int s = 0; s < Cfg::kStaged; ++s) sm90::barrier_init(&ss->staged[s], 1);
    sm90::barrier_init_fence();
  }
  if (wg == 0) {  // a producer
    for (int i = tid; i < npages; i += 128) {
      const int32_t page =
          p.block_table[tile.req * p.bt_stride_req + (b_begin + i) * p.bt_stride_block];
      const bool ok = page >= 0 && page < p.num_cache_blocks;
      if (!ok) raise_error(p.error_flags, kDeviceErrorBlockId);
      const int64_t copied = static_cast<int64_t>(tile.req) * p.rows.max_blocks + b_begin + i;
      ss->pages[i] = !ok ? -1 : p.keys_copied ? static_cast<int32_t>(copied) : page;
    }
  } else if (wg >= Cfg::kProducers) {
    // Queries of this consumer warpgroup's 64 rows into the swizzled 16-bit tile (zeros for rows
    // outside the tile's tokens; e4m3 converted to f16).
    const int t = tid - 128 * wg;
    const int H = p.num_heads;
    constexpr int kChunks = kIndexDim * Cfg::kQElemBytes / 16;  // 16-byte chunks per given row
    for (int c = t; c < 64 * kChunks; c += 128) {
      const int r = 64 * (wg - Cfg::kProducers) + c / kChunks, chunk = c % kChunks;
      const int64_t pos = tile.win_pos + r / H;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (pos >= tile.lo && pos < tile.hi) {
        const int64_t row = tile.row0 + (pos - tile.start_pos);
        const auto* src = static_cast<const uint8_t*>(p.index_q) +
                          (row * p.q_stride_row + (r % H) * p.q_stride_head) * Cfg::kQElemBytes;
        v = ld_raw_v4(src + chunk * 16);
      }
      if constexpr (Cfg::kF16) {
        store_e4m3x16_as_f16(sQ, kIndexRows, r, chunk, v);
      } else {
        const int panel = chunk / 8;
        *reinterpret_cast<uint4*>(sQ + panel * (kIndexRows * 128) +
                                  sm90::swizzled_chunk(static_cast<uint32_t>(r), chunk % 8)) = v;
      }
    }
    sm90::fence_async_shared();
  }
  __syncthreads();

  if (wg < Cfg::kProducers) {
    sm90::regs_dealloc<Cfg::kProducerRegs>();
    if constexpr (Cfg::kStagedKeys) {
      // Producer wg takes blocks i = wg, wg + 2, ...: its staging buffer 2 wg + (i / 2) % 2 takes
      // block i's e4m3 keys, and block i + 4's copy is issued once its 128 threads have converted
      // block i out of it. The ring stage i % kStages (kStages even) only ever holds this
      // producer's blocks. A dropped page (< 0) copies nothing: its arrival completes the phase,
      // and its scores are written as -inf.
      const int t = tid - 128 * wg;
      auto staging = [&](int i) { return 2 * wg + (i / 2) % 2; };
      auto stage_copy = [&](int i) {
        uint64_t* bar = &ss->staged[staging(i)];
        const int32_t page = ss->pages[i];
        if (page < 0) {
          sm90::barrier_arrive(bar);
          return;
        }
        sm90::barrier_expect_tx(bar, Cfg::kStagedBytes);
        sm90::tma_load_3d(&key_map, bar, sStaged + staging(i) * Cfg::kStagedBytes, 0, 0, page);
      };
      if (t == 0) {
        sm90::tma_prefetch_map(&key_map);
        for (int i = wg; i < min(npages, wg + 4); i += 2) stage_copy(i);
      }
      for (int i = wg; i < npages; i += 2) {
        const int s = i % Cfg::kStages;
        if (i >= Cfg::kStages) sm90::barrier_wait(&ss->empty[s], ((i / Cfg::kStages) - 1) & 1);
        sm90::barrier_wait(&ss->staged[staging(i)], (i / 4) & 1);
        if (ss->pages[i] >= 0) {
          convert_staged_keys(sStaged + staging(i) * Cfg::kStagedBytes, sK + s * Cfg::kTileBytes,
                              t);
        }
        sm90::fence_async_shared();     // the f16 tile, before the consumers' wgmma reads it
        sm90::named_sync(1 + wg, 128);  // this producer's threads are done with the buffer
        if (t == 0) {
          sm90::barrier_arrive(&ss->full[s]);
          if (i + 4 < npages) stage_copy(i + 4);
        }
      }
    } else if (tid == 0) {
      sm90::tma_prefetch_map(&key_map);
      for (int i = 0; i < npages; ++i) {
        const int s = i % Cfg::kStages;
        if (i >= Cfg::kStages) sm90::barrier_wait(&ss->empty[s], ((i / Cfg::kStages) - 1) & 1);
        const int32_t page = ss->pages[i];
        if (page < 0) {
          sm90::barrier_arrive(&ss->full[s]);
          continue;
        }
        sm90::barrier_expect_tx(&ss->full[s], Cfg::kTileBytes);
        uint8_t* dst = sK + s * Cfg::kTileBytes;
        sm90::tma_load_3d(&key_map, &ss->full[s], dst, 0, 0, page);
        sm90::tma_load_3d(&key_map, &ss->full[s], dst + kIndexKeys * 128, 64, 0, page);
      }
    }
    return;
  }

  sm90::regs_alloc<Cfg::kConsumerRegs>();
  const int cw = wg - Cfg::kProducers;  // consumer warpgroup: rows 64 cw .. 64 cw + 63
  const int t = tid - 128 * wg;
  const int H = p.num_heads;
  const uint32_t q_addr = sm90::smem_addr(sQ) + static_cast<uint32_t>(cw) * 64u * 128u;
  const uint32_t k_base = sm90::smem_addr(sK);
  // This thread's two rows: their positions, validity and score addresses.
  const int r0 = 64 * cw + sm90::acc_row(t, 0), r1 = r0 + 8;
  const int64_t pos0 = tile.win_pos + r0 / H, pos1 = tile.win_pos + r1 / H;
  const bool live0 = pos0 >= tile.lo && pos0 < tile.hi;
  const bool live1 = pos1 >= tile.lo && pos1 < tile.hi;
  const int64_t T = p.rows.num_rows, MB = p.rows.max_blocks;
  float* out0 =
      p.scores + (static_cast<int64_t>(r0 % H) * T + tile.row0 + (pos0 - tile.start_pos)) * MB;
  float* out1 =
      p.scores + (static_cast<int64_t>(r1 % H) * T + tile.row0 + (pos1 - tile.start_pos)) * MB;
  const bool writer = (t & 3) == 0;

  float acc0[64], acc1[64];
  auto wait_full = [&](int i) {
    sm90::barrier_wait(&ss->full[i % Cfg::kStages], (i / Cfg::kStages) & 1);
  };
  auto release = [&](int i) { sm90::barrier_arrive(&ss->empty[i % Cfg::kStages]); };
  // The own block (scored only when local_blocks is 0) drops each row's keys past its position.
  const int own_lim0 = static_cast<int>(min(max(pos0 - own * bs, int64_t{-1}), int64_t{127}));
  const int own_lim1 = static_cast<int>(min(max(pos1 - own * bs, int64_t{-1}), int64_t{127}));
  // kMasked: the block may be the own block. It is the chunk's last if anything (b_end <= own +
  // 1), so only the tail's blocks may be it; the steady loop's take every column.
  auto epilogue = [&](auto masked, const float(&acc)[64], int i) {
    const int64_t b = b_begin + i;
    const bool is_own = b == own;
    float m0, m1;
    block_max_rows<decltype(masked)::value>(acc, t, is_own ? own_lim0 : 127,
                                            is_own ? own_lim1 : 127, m0, m1);
    const bool bad = ss->pages[i] < 0;
    st_global_if(out0 + b, bad ? -INFINITY : m0, writer && live0);
    st_global_if(out1 + b, bad ? -INFINITY : m1, writer && live1);
  };
  constexpr std::false_type kAllColumns{};
  constexpr std::true_type kOwnMasked{};
  // The accumulators are fenced before their MMAs and after the wait that completes them (a
  // fence is a use: one right after the commit would make the compiler wait for the MMAs).
  auto issue = [&](float(&acc)[64], int i) {
    sm90::fence_acc(acc);
    issue_block_mma<Cfg::kF16>(
        q_addr, k_base + static_cast<uint32_t>((i % Cfg::kStages) * Cfg::kTileBytes), acc);
  };

  // Two blocks per iteration, accumulators alternating: block i + 1's MMAs run while block i's
  // maxima are reduced. The steady loop issues unconditionally; the tail takes the last one or
  // two blocks.
  wait_full(0);
  issue(acc0, 0);
  int i = 0;
  for (; i + 2 < npages; i += 2) {
    wait_full(i + 1);
    issue(acc1, i + 1);
    sm90::mma_wait<1>();
    sm90::fence_acc(acc0);
    release(i);
    epilogue(kAllColumns, acc0, i);
    wait_full(i + 2);
    issue(acc0, i + 2);
    sm90::mma_wait<1>();
    sm90::fence_acc(acc1);
    release(i + 1);
    epilogue(kAllColumns, acc1, i + 1);
  }
  if (i + 1 < npages) {
    wait_full(i + 1);
    issue(acc1, i + 1);
    sm90::mma_wait<1>();
    sm90::fence_acc(acc0);
    release(i);
    epilogue(kAllColumns, acc0, i);
    sm90::mma_wait<0>();
    sm90::fence_acc(acc1);
    release(i + 1);
    epilogue(kOwnMasked, acc1, i + 1);
  } else {
    sm90::mma_wait<0>();
    sm90::fence_acc(acc0);
    release(i);
    epilogue(kOwnMasked, acc0, i);
  }
}

}  // namespace prefill
}  // namespace cuda
}  // namespace msa
