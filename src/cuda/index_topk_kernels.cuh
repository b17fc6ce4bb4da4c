// Device code of the indexer (spec A2-A4, A12): streaming block-score kernels (SIMT, and a
// tensor-core one for head dims multiple of 64) and a
// deterministic radix top-k selection kernel. Launchers and the work decomposition rationale
// are in index_topk.cu.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/mma.cuh"
#include "cuda/row_map.cuh"

namespace msa {
namespace cuda {

constexpr int kScoreThreads = 256;
constexpr int kScoreWarps = kScoreThreads / 32;
constexpr int kMaxScoreRowHeads = 32;  // (row, head) query vectors held by one score CTA
constexpr int kMaxScoreBlocks = 32;    // blocks per score CTA
constexpr int kMaxIndexDim = 256;
constexpr int kSelectThreads = 256;

struct IndexSelectParams {
  const float* scores;  // [H, T, max_blocks]
  RowMap rows;
  int32_t topk, init_blocks, local_blocks;
  int32_t* out;  // [H, >= T, out_cols]
  int64_t out_stride_head, out_stride_row, out_stride_col;
  int64_t out_cols;
};

// In order of first use ("Kernel parameters" in common.cuh): what the prologue reads before its
// first loads (the first line, then the row map's), then the block table, queries and keys.
struct IndexScoreParams {
  int32_t rows_per_tile;   // rows per CTA (decode: the query length, so a CTA is one request)
  int32_t blocks_per_cta;  // <= kMaxScoreBlocks
  int32_t num_heads;
  int32_t head_dim;
  // The select kernel (a dependent launch) may start once every score CTA has started, rather
  // than once each has scored its blocks (IndexLaunchPlan::early_select).
  bool early_select;
  // The balanced grid's lead units per request (detail::balanced_lead_units); 16 bits, where the
  // first line had padding, so that no field moves to another line.
  int16_t balanced_lead;
  DType q_dtype;
  RowMap rows;
  const int32_t* block_table;  // [num_requests, max_blocks]
  int64_t bt_stride_req, bt_stride_block;
  const void* index_q;  // [T, H, Di]
  int64_t q_stride_row, q_stride_head, q_stride_dim;
  const void* cache;  // [num_blocks, block_size, Di], 16-byte (bf16) / 8-byte (e4m3) aligned keys
  int64_t cache_stride_page, cache_stride_key;
  int64_t num_cache_blocks;
  float* scores;  // [H, T, max_blocks] block maxima; only visible blocks are written
  int32_t* error_flags;
};

// How a tensor-core score grid maps CTAs to blocks: row tile x chunk (static), the same with the
// chunks of a request one cluster that selects its top-k (cluster_select_topk), or equal shares
// of all requests' visible blocks found at run time (IndexLaunchPlan::balanced_ctas).
enum class ScoreGrid { kStatic, kClusterSelect, kBalanced };

// Total order of spec A3 as one 64-bit key: tier (init 2 > local 1 > scored 0) in bits 62-63,
// the ordered score in bits 30-61 (forced tiers use 0, so they tie), and 0x3FFFFFFF - block in
// bits 0-29 so that equal scores go to the lower block id. Keys are distinct per block.
// s is block b's score (b < 2^30, check_supported); blocks below init_blocks are forced init,
// those from local_start (the row's visible block count minus local_blocks) forced local. Built
// from two 32-bit halves with selects and no branch: the wide select kernel builds up to 16 keys
// per thread while its CTA runs alone on its SM, and the branchy form (a convergence region per
// tier test) cost ~0.2 us per key there (%globaltimer trace,
// bench/results/2026-12-01-select-key-build/).
__device__ __forceinline__ uint64_t selection_key(float s, int32_t b, int32_t init_blocks,
                                                  int32_t local_start) {
  const uint32_t id_bits = 0x3FFFFFFFu - static_cast<uint32_t>(b);
  const float c = isnan(s) ? -1e30f : (s == 0.0f ? 0.0f : s);  // -0 ties with +0
  const uint32_t o = ordered_f32(c);
  const bool init = b < init_blocks, local = b >= local_start;
  const uint32_t hi = init ? 0x80000000u : (local ? 0x40000000u : o >> 2);
  const uint32_t lo = (init || local) ? id_bits : ((o << 30) | id_bits);
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// Keys a selecting thread keeps in registers: block tables of up to 256 x 16 = 4096 columns
// (512K tokens at block 128) are selected from registers; wider ones re-read the row's scores
// at every pass.
constexpr int kSelectKeysPerThread = 16;

constexpr int kSelectWarps = kSelectThreads / 32;
// Slots for the warps' tops (warp_tops_threshold), one per lane of the warp that ranks them, and
// the largest keys per warp that fill them.
constexpr int kWarpTopSlots = 32;
constexpr int kMaxWarpTops = kWarpTopSlots / kSelectWarps;

struct SelectSmem {
  union {
    // Radix path: pass p counts into hist[p & 1] while hist[(p + 1) & 1] is cleared.
    alignas(16) uint32_t hist[2][256];
    // Rank path: the key of block b (0: not visible); candidate paths: the candidate keys.
    alignas(16) uint64_t keys[kSelectThreads];
  };
  // Warp tops: top t of warp w at t * warps + w.
  uint64_t tops[kWarpTopSlots];
  int32_t warp_sums[kSelectWarps];
  uint32_t digit, remaining, done;
  uint64_t threshold;
};

// Exclusive prefix sum of v over the CTA's threads in thread order, and the CTA total (a warp
// scan plus the per-warp totals, one CTA barrier; warp_sums stays in use until the caller's next
// barrier).
__device__ __forceinline__ int32_t exclusive_sum(int32_t v, SelectSmem& sm, int32_t* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int32_t incl = v;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int32_t u = __shfl_up_sync(0xFFFFFFFFu, incl, off);
    if (lane >= off) incl += u;
  }
  if (lane == 31) sm.warp_sums[warp] = incl;
  __syncthreads();
  int32_t offset = incl - v, sum = 0;
  for (int w = 0; w < kSelectWarps; ++w) {
    const int32_t ws = sm.warp_sums[w];
    if (w < warp) offset += ws;
    sum += ws;
  }
  *total = sum;
  return offset;
}

// The largest of keys[] below `bound` (0: none; absent keys are 0).
template <int P>
__device__ __forceinline__ uint64_t largest_below(const uint64_t (&keys)[P], uint64_t bound) {
  uint64_t best = 0;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (keys[i] < bound && keys[i] > best) best = keys[i];
  }
  return best;
}

// The largest of the warp's 64-bit values, by every lane: the high words' maximum, then the low
// words' maximum among the lanes that hold it, two redux.sync instructions where a shuffle
// butterfly takes five dependent rounds of two shuffles, a 64-bit compare and two selects.
__device__ __forceinline__ uint64_t warp_max_key(uint64_t v) {
  const uint32_t hi = static_cast<uint32_t>(v >> 32);
  const uint32_t top_hi = __reduce_max_sync(0xFFFFFFFFu, hi);
  const uint32_t lo = __reduce_max_sync(0xFFFFFFFFu, hi == top_hi ? static_cast<uint32_t>(v) : 0u);
  return (static_cast<uint64_t>(top_hi) << 32) | lo;
}

// Warps that warp_tops_threshold needs for `kept` keys: the tops of the first `warps` warps
// (those whose threads can hold keys) must number at least kept, at most kMaxWarpTops each.
__device__ __forceinline__ bool warp_tops_fit(int64_t kept, int64_t warps) {
  return warps >= 1 && warps <= kSelectWarps && kept <= warps * kMaxWarpTops;
}

// A lower bound on the kept-th largest key of a row whose keys (0: absent) are spread over the
// threads of the first `warps` warps, keys[] per thread (requires warp_tops_fit): each of those
// warps gathers its m = ceil(kept / warps) largest keys by m warp max-reductions, and the kept-th
// largest of these distinct keys has at least kept keys at or above it (0, no bound, when they
// are fewer than kept). For unordered scores few keys beyond the kept ones reach it (about 30
// at top-16), so the candidate rank is short, and gathering the tops costs a few warp
// reductions where ranking one sample per thread costs a pass over 256 of them. One CTA
// barrier; every thread returns the same value.
template <int P>
__device__ uint64_t warp_tops_threshold(const uint64_t (&keys)[P], int64_t kept, int warps,
                                        SelectSmem& sm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int m = static_cast<int>((kept + warps - 1) / warps);
  if (warp < warps) {
    uint64_t cur = largest_below(keys, ~0ull);
    for (int t = 0; t < m; ++t) {
      const uint64_t top = warp_max_key(cur);
      if (lane == 0) sm.tops[t * warps + warp] = top;
      if (t + 1 < m) {
        // The lane that held the top moves to its next key (keys are distinct). Every lane runs
        // the scan, so the warp does not diverge around it.
        const uint64_t next = largest_below(keys, top);
        if (cur == top) cur = next;
      }
    }
  }
  __syncthreads();
  const int n = warps * m;  // <= kWarpTopSlots
  const uint64_t v = lane < n ? sm.tops[lane] : 0;
  // All slots are read at once (a read behind a branch or a loop bound would wait for the one
  // before it); slots past n, from an earlier row or unset, are masked.
  uint64_t tops[kWarpTopSlots];
#pragma unroll
  for (int u = 0; u < kWarpTopSlots; ++u) tops[u] = sm.tops[u];
  int above = 0;
#pragma unroll
  for (int u = 0; u < kWarpTopSlots; ++u) above += (u < n && tops[u] > v) ? 1 : 0;
  const uint32_t hit = __ballot_sync(0xFFFFFFFFu, v != 0 && above == kept - 1);
  return hit != 0 ? __shfl_sync(0xFFFFFFFFu, v, __ffs(hit) - 1) : 0;
}

// How many of keys[0, n) exceed key (n <= kSelectThreads, keys: SelectSmem::keys). The keys are
// read 16 at a time into distinct registers, so that their 16-byte shared loads can be in flight
// together (ptxas still issues some batches one load at a time); a plain loop over them reused
// one register quadruple and waited for every load in turn (~35 cycles per two keys: ~2 us for
// the 256 keys of a 32K-token table). Entries from n to the next multiple of 16 are read (inside
// the array) and masked.
__device__ __forceinline__ int count_above(const uint64_t* keys, int n, uint64_t key) {
  constexpr int kBatch = 16;
  int above = 0;
  for (int u = 0; u < n; u += kBatch) {
    ulonglong2 w[kBatch / 2];
#pragma unroll
    for (int j = 0; j < kBatch / 2; ++j) w[j] = reinterpret_cast<const ulonglong2*>(keys + u)[j];
#pragma unroll
    for (int j = 0; j < kBatch / 2; ++j) {
      above += (u + 2 * j < n && w[j].x > key) ? 1 : 0;
      above += (u + 2 * j + 1 < n && w[j].y > key) ? 1 : 0;
    }
  }
  return above;
}

// Largest keys a warp tournament selects (tournament_threshold).
constexpr int kTournamentKeys = 16;
// Rows of at most this many visible blocks keep the rank count, which then runs on the two warps
// that hold them and costs less than the tournament's eight: with the tournament the 8K index
// calls (64 columns) were 0.5-1.5 us slower on the H200, the 32K ones (256 columns) 0.3-1.4 us
// faster (bench/results/2026-12-01-select-tournament-rolled/).
constexpr int64_t kTournamentMinBlocks = 64;

// The kept-th largest of the CTA's keys (one per thread, 0 for none; keys distinct where
// nonzero), for 1 <= kept <= kTournamentKeys, by every thread of the CTA: each warp sorts its 32
// keys with a bitonic network of shuffles and offers its 16 largest, then warps merge pairs of
// sorted lists (the larger of A[i] and B[15 - i] is a bitonic sequence holding their 16
// largest, which a four-stage bitonic merge sorts) until one list is left: 15 + 3 x 4 shuffle
// stages and four CTA barriers, against the rank count's 256 x 256 comparisons through shared
// memory at 256 columns. The loops stay rolled: the select kernel runs alone on its SM with cold
// instruction caches (at 32K x 1 the warps spent 46% of their stalled cycles waiting for
// instructions, Nsight Compute): unrolled, the network took the kernel 1.4 us longer than with
// these loops, and no less time than the count
// (bench/results/2026-12-01-select-tournament-rolled/). Uses sm.keys; returns after a barrier,
// so sm.keys may be reused at once.
__device__ uint64_t tournament_threshold(uint64_t key, int64_t kept, SelectSmem& sm) {
  static_assert(
      kSelectWarps * kTournamentKeys + kSelectWarps / 2 * kTournamentKeys <= kSelectThreads,
      "both merge buffers fit sm.keys");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Ascending sort of the warp's keys: lane 31 ends with the largest.
  uint64_t v = key;
#pragma unroll 1
  for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll 1
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const uint64_t other = __shfl_xor_sync(0xFFFFFFFFu, v, stride);
      const bool take_min = ((lane & stride) == 0) == ((lane & size) == 0);
      v = take_min ? min(v, other) : max(v, other);
    }
  }
  // List w, descending, at sm.keys[16 w + r]; merged lists go to the other buffer.
  uint64_t* in = sm.keys;
  uint64_t* out = sm.keys + kSelectWarps * kTournamentKeys;
  if (lane >= 32 - kTournamentKeys) in[warp * kTournamentKeys + (31 - lane)] = v;
  __syncthreads();
#pragma unroll 1
  for (int lists = kSelectWarps; lists > 1; lists >>= 1) {
    if (warp < lists / 2) {
      const int i = lane & (kTournamentKeys - 1);
      const uint64_t a = in[(2 * warp) * kTournamentKeys + i];
      const uint64_t b = in[(2 * warp + 1) * kTournamentKeys + (kTournamentKeys - 1 - i)];
      uint64_t m = max(a, b);
      // Descending bitonic merge over lanes 0-15 (lanes 16-31 repeat them).
#pragma unroll 1
      for (int stride = kTournamentKeys / 2; stride > 0; stride >>= 1) {
        const uint64_t other = __shfl_xor_sync(0xFFFFFFFFu, m, stride);
        m = (i & stride) == 0 ? max(m, other) : min(m, other);
      }
      if (lane < kTournamentKeys) out[warp * kTournamentKeys + i] = m;
    }
    __syncthreads();
    uint64_t* t = in;
    in = out;
    out = t;
  }
  const uint64_t threshold = in[kept - 1];
  __syncthreads();  // sm.keys is the caller's again
  return threshold;
}

// Selects the row's kept blocks among its keys >= lower (a bound that at least kept keys reach):
// they are packed into shared memory in block order (keys[] of a thread are consecutive blocks,
// threads in block order), each ranked among the others, and the kept ones written ascending
// with -1 padding. Returns false, having written nothing, when more than kSelectThreads keys
// reach the bound; the caller then selects another way.
template <int P>
__device__ bool select_candidates(const IndexSelectParams& prm, int64_t row, int64_t h,
                                  const uint64_t (&keys)[P], int64_t kept, uint64_t lower,
                                  SelectSmem& sm) {
  const int tid = threadIdx.x;
  int32_t count = 0;
#pragma unroll
  for (int i = 0; i < P; ++i) count += (keys[i] != 0 && keys[i] >= lower) ? 1 : 0;
  int32_t candidates = 0;
  int32_t slot = exclusive_sum(count, sm, &candidates);
  if (candidates > kSelectThreads) {
    __syncthreads();  // warp_sums
    return false;
  }
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (keys[i] != 0 && keys[i] >= lower) sm.keys[slot++] = keys[i];
  }
  __syncthreads();
  // Candidate c is ranked by `parts` adjacent threads (a power of two <= 4 while parts x
  // candidates fill at most the CTA), each counting the keys above it in one slice of the set, so
  // the usual few dozen candidates take one 16-key batch per thread rather than a serial chain of
  // four (~0.8 us at 128K x 16 where the whole select took ~3.5 us; %globaltimer trace,
  // bench/results/2026-12-01-select-key-build/). Slices start on 16-key boundaries (16-byte
  // loads in count_above).
  const int log_parts = candidates <= kSelectThreads / 4 ? 2 : candidates <= kSelectThreads / 2;
  const int c = tid >> log_parts, part = tid & ((1 << log_parts) - 1);
  const uint64_t key = c < candidates ? sm.keys[c] : 0;
  bool keep = false;
  if ((tid & ~31) < (candidates << log_parts)) {  // warp-uniform
    const int slice = (((candidates + (1 << log_parts) - 1) >> log_parts) + 15) & ~15;
    const int first = min(part * slice, candidates);
    int above = count_above(sm.keys + first, min(slice, candidates - first), key);
    for (int off = 1; off < (1 << log_parts); off <<= 1) {
      above += __shfl_xor_sync(0xFFFFFFFFu, above, off);
    }
    keep = part == 0 && c < candidates && above < kept;
  }
  int32_t total = 0;
  const int32_t offset = exclusive_sum(keep ? 1 : 0, sm, &total);
  int32_t* out = prm.out + h * prm.out_stride_head + row * prm.out_stride_row;
  if (keep) {
    out[offset * prm.out_stride_col] = static_cast<int32_t>(0x3FFFFFFFull - (key & 0x3FFFFFFFull));
  }
  for (int64_t c = kept + tid; c < prm.out_cols; c += kSelectThreads) {
    out[c * prm.out_stride_col] = -1;
  }
  __syncthreads();  // keys and warp_sums are reused by the caller's next row
  return true;
}

// The kept blocks of one (row, head) among its nvb <= kSelectThreads visible blocks, by all
// kSelectThreads threads of the calling CTA: thread b passes block b's score (ignored for b >=
// nvb). A block is kept when fewer than `kept` keys exceed it (keys are distinct, so exactly
// min(topk, nvb) are): when it reaches the kept-th largest key, which a warp tournament finds
// for rows of more than kTournamentMinBlocks blocks and top-k up to kTournamentKeys; otherwise
// by counting ranks against the keys in shared memory (one pass of nvb broadcast reads per warp
// that holds a visible block and two CTA barriers, where the radix descent needs two barriers
// per 8-bit digit it resolves). Same total order, same output.
__device__ void write_row_topk_by_rank(const IndexSelectParams& prm, int64_t row, int64_t h,
                                       float raw, int64_t nvb, SelectSmem& sm) {
  const int tid = threadIdx.x;
  const int64_t kept = min(static_cast<int64_t>(prm.topk), nvb);
  const bool visible = tid < nvb;
  const uint64_t key = visible ? selection_key(raw, tid, prm.init_blocks,
                                               static_cast<int32_t>(nvb) - prm.local_blocks)
                               : 0;
  bool keep = visible;
  if (nvb > kept && nvb > kTournamentMinBlocks && kept <= kTournamentKeys) {
    // Called by every thread (shuffles and barriers), not behind `visible`. Keys are distinct,
    // so exactly `kept` reach the kept-th largest.
    const uint64_t threshold = tournament_threshold(key, kept, sm);
    keep = visible && key >= threshold;
  } else if (nvb > kept) {
    sm.keys[tid] = key;
    __syncthreads();
    if ((tid & ~31) < nvb) {  // warp-uniform: warps without a visible block skip the count
      keep = visible && count_above(sm.keys, static_cast<int>(nvb), key) < kept;
    }
  }
  int32_t total = 0;
  const int32_t offset = exclusive_sum(keep ? 1 : 0, sm, &total);
  int32_t* out = prm.out + h * prm.out_stride_head + row * prm.out_stride_row;
  if (keep) out[offset * prm.out_stride_col] = tid;
  for (int64_t c = kept + tid; c < prm.out_cols; c += kSelectThreads) {
    out[c * prm.out_stride_col] = -1;
  }
  __syncthreads();  // keys and warp_sums are reused by the caller's next row
}

// Visible blocks of a row at position pos (0 for padding rows and rows of invalid requests).
__device__ __forceinline__ int64_t visible_blocks(const RowInfo& info, int64_t pos,
                                                  int64_t block_size) {
  return (info.req >= 0 && pos >= 0) ? pos / block_size + 1 : 0;
}

// select_row_topk for block tables of at most kSelectThreads columns, from the score workspace.
__device__ void select_row_topk_by_rank(const IndexSelectParams& prm, int64_t row, int64_t h,
                                        SelectSmem& sm) {
  const int64_t T = prm.rows.num_rows;
  const int64_t max_blocks = prm.rows.max_blocks;
  // Loaded before the row's length is known (column clamped into the row; none when the table
  // has no columns).
  const int tid = threadIdx.x;
  const int64_t col = min(static_cast<int64_t>(tid), max_blocks - 1);
  const int64_t req = decode_request(prm.rows, row);
  const uint32_t early_seq_len = ld_decode_seq_len_of(prm.rows, req);  // see select_row_topk
  wait_for_prior_grid();  // the scores come from the score kernel
  const float raw = col >= 0 ? __ldcg(prm.scores + (h * T + row) * max_blocks + col) : 0.0f;
  const RowInfo info = resolve_row_of(prm.rows, row, nullptr, early_seq_len, req);
  write_row_topk_by_rank(prm, row, h, raw,
                         visible_blocks(info, info.pos_base + row, prm.rows.block_size), sm);
}

// Wide tables (more than kSelectThreads columns, keys in registers; requires nvb > kept): a
// lower bound on the kept-th largest key, then the rank count on the candidate set of keys that
// reach it (select_candidates). The bound comes first from the warps' tops (warp_tops_threshold)
// when they can gather enough; when that is not possible, or lets more than kSelectThreads keys
// through (scores that grow with the block id: the low warps' tops are low), from samples: the
// first key of every thread's range, whose kept-th largest bounds the row's kept-th largest key
// from below (about kept x keys-per-thread candidates for unordered scores). Returns false,
// having written nothing, when that too lets more than kSelectThreads keys through; the caller
// then runs the radix descent.
template <int P>
__device__ bool select_wide_by_candidates(const IndexSelectParams& prm, int64_t row, int64_t h,
                                          const uint64_t (&keys)[P], int64_t per_thread,
                                          int64_t nvb, int64_t kept, SelectSmem& sm) {
  const int tid = threadIdx.x;
  const int64_t nsamples =
      min(static_cast<int64_t>(kSelectThreads), (nvb + per_thread - 1) / per_thread);
  const int warps = static_cast<int>((nsamples + 31) / 32);
  if (warp_tops_fit(kept, warps) &&
      select_candidates(prm, row, h, keys, kept, warp_tops_threshold(keys, kept, warps, sm), sm)) {
    return true;
  }
  const uint64_t sample = keys[0];  // 0 when this thread's range holds no visible block
  sm.keys[tid] = sample;
  if (tid == 0) sm.threshold = 0;  // fewer samples than kept blocks: every key is a candidate
  __syncthreads();
  if (nsamples >= kept && (tid & ~31) < nsamples) {  // warp-uniform
    if (sample != 0 && count_above(sm.keys, static_cast<int>(nsamples), sample) == kept - 1) {
      sm.threshold = sample;
    }
  }
  __syncthreads();
  // select_candidates rewrites keys only after a barrier, when every thread has read this.
  return select_candidates(prm, row, h, keys, kept, sm.threshold, sm);
}

// The kept blocks of one (row, head) of a table of more than kSelectThreads columns (narrow
// tables take select_row_topk_by_rank), written in ascending id order with -1 padding, by all
// kSelectThreads threads of the calling CTA. The K-th
// largest key is found exactly by an 8-bit radix descent (integer histogram counts are
// order-independent, hence deterministic); the kept blocks are then written by a block-wide
// exclusive scan over contiguous per-thread ranges. Every column of the output row is written.
//
// Thread ranges cut the block-table capacity, not the row's visible blocks, so the score loads
// (read once, into registers, bypassing L1) do not wait for the row's sequence length: both are
// one round trip. Scores past the visible blocks are loaded and ignored (the workspace holds
// max_blocks per row). A radix pass costs two CTA barriers. kKeys (at most kSelectKeysPerThread)
// is the register array a thread keeps its keys in: the launcher picks the smallest that holds the
// table's keys per thread (select_keys_per_thread), since the loads and key loops run over all
// kKeys slots, used or not.
template <int kKeys>
__device__ void select_row_topk(const IndexSelectParams& prm, int64_t row, int64_t h,
                                SelectSmem& sm) {
  static_assert(kKeys <= kSelectKeysPerThread, "keys per thread");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t T = prm.rows.num_rows;
  const int64_t max_blocks = prm.rows.max_blocks;
  const float* scores = prm.scores + (h * T + row) * max_blocks;
  const int64_t per_thread = (max_blocks + kSelectThreads - 1) / kSelectThreads;
  const int64_t begin = min(max_blocks, tid * per_thread);
  const bool cached = per_thread <= kKeys;
  // A decode row's sequence length is loaded before the wait (an input of this call, which the
  // stream finished writing before the score kernel started) and resolved after the score loads
  // are issued, so that its load overlaps the wait and theirs. Resolving it before the wait (a
  // branch on the loaded length) put a cold load, ~0.65 us from entry to the wait, on the path
  // of every select CTA launched after the score grid's last CTA
  // (bench/results/2026-12-01-select-key-build/).
  const int64_t req = decode_request(prm.rows, row);
  const uint32_t early_seq_len = ld_decode_seq_len_of(prm.rows, req);
  wait_for_prior_grid();  // the scores come from the score kernel
  // Unconditional loads (index clamped into the row), used only after all are issued. A thread's
  // range is contiguous, so where it starts on a 16-byte boundary (row length and range length
  // multiples of 4, workspace aligned as Workspace documents) its scores come as float4 loads:
  // a quarter of the load instructions, and one L1 wavefront per 4 lines of a warp's load where
  // the scalar loads' 16 threads apart touched 16 lines each.
  float raw[kKeys];
  if (cached && max_blocks > 0) {
    const bool quads = kKeys % 4 == 0 && per_thread % 4 == 0 && max_blocks % 4 == 0 &&
                       (reinterpret_cast<uintptr_t>(prm.scores) & 15) == 0;
    if (quads) {
#pragma unroll
      for (int j = 0; j < kKeys / 4; ++j) {
        const float4 v =
            __ldcg(reinterpret_cast<const float4*>(scores + min(begin + 4 * j, max_blocks - 4)));
        raw[4 * j] = v.x;
        raw[4 * j + 1] = v.y;
        raw[4 * j + 2] = v.z;
        raw[4 * j + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < kKeys; ++i) raw[i] = __ldcg(scores + min(begin + i, max_blocks - 1));
    }
  }

  const RowInfo info = resolve_row_of(prm.rows, row, nullptr, early_seq_len, req);
  const int64_t nvb = visible_blocks(info, info.pos_base + row, prm.rows.block_size);
  const int64_t kept = min(static_cast<int64_t>(prm.topk), nvb);
  const int64_t end = min(nvb, begin + per_thread);
  // Block ids and counts fit 32 bits (max_blocks < 2^30, check_supported).
  const int32_t local_start = static_cast<int32_t>(nvb) - prm.local_blocks;
  uint64_t keys[kKeys];
  if (cached) {
    const int32_t begin32 = static_cast<int32_t>(begin), end32 = static_cast<int32_t>(end);
#pragma unroll
    for (int i = 0; i < kKeys; ++i) {
      const uint64_t key = selection_key(raw[i], begin32 + i, prm.init_blocks, local_start);
      keys[i] = begin32 + i < end32 ? key : 0;
    }
  }
  // f(block, key) over this thread's range, from registers when they hold it.
  auto for_each_key = [&](auto&& f) {
    if (cached) {
#pragma unroll
      for (int i = 0; i < kKeys; ++i) {
        if (begin + i < end) f(begin + i, keys[i]);
      }
    } else {
      for (int64_t b = begin; b < end; ++b) {
        f(b,
          selection_key(__ldcg(scores + b), static_cast<int32_t>(b), prm.init_blocks, local_start));
      }
    }
  };

  if (cached && nvb > kept) {
    if (select_wide_by_candidates(prm, row, h, keys, per_thread, nvb, kept, sm)) return;
  }
  uint64_t threshold = 0;  // keep every block with key >= threshold
  if (nvb > kept) {
    uint64_t prefix = 0, mask = 0;
    uint32_t remaining = static_cast<uint32_t>(kept);
    // Cleared here, not earlier: the sampled pass shares this memory (keys) and ends with a
    // barrier.
    sm.hist[0][tid] = 0;
    __syncthreads();  // hist[0] is clear
    for (int shift = 56, buf = 0; shift >= 0; shift -= 8, buf ^= 1) {
      uint32_t* hist = sm.hist[buf];
      for_each_key([&](int64_t, uint64_t key) {
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xFF], 1u);
      });
      __syncthreads();
      if (warp == 0) {
        // Lane l owns bins 255-8l down to 248-8l (two 16-byte reads), so lane order is
        // descending digit order.
        const uint4 lo = *reinterpret_cast<const uint4*>(hist + 248 - 8 * lane);
        const uint4 hi = *reinterpret_cast<const uint4*>(hist + 252 - 8 * lane);
        const uint32_t c[8] = {hi.w, hi.z, hi.y, hi.x, lo.w, lo.z, lo.y, lo.x};
        uint32_t sum = 0;
#pragma unroll
        for (int e = 0; e < 8; ++e) sum += c[e];
        uint32_t incl = sum;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
          const uint32_t v = __shfl_up_sync(0xFFFFFFFFu, incl, off);
          if (lane >= off) incl += v;
        }
        uint32_t above = incl - sum;
        if (above < remaining && remaining <= incl) {
          for (int e = 0; e < 8; ++e) {
            if (above + c[e] >= remaining) {
              sm.digit = 255 - 8 * lane - e;
              sm.remaining = remaining - above;
              sm.done = (c[e] == remaining - above) ? 1u : 0u;
              break;
            }
            above += c[e];
          }
        }
      } else {
        sm.hist[buf ^ 1][tid - 32] = 0;
        if (tid < 64) sm.hist[buf ^ 1][tid + 192] = 0;
      }
      __syncthreads();
      prefix |= static_cast<uint64_t>(sm.digit) << shift;
      mask |= 0xFFull << shift;
      remaining = sm.remaining;
      if (sm.done) break;
    }
    threshold = prefix;
  }

  int32_t count = 0;
  for_each_key([&](int64_t, uint64_t key) { count += key >= threshold; });
  int32_t total = 0;
  int64_t offset = exclusive_sum(count, sm, &total);

  int32_t* out = prm.out + h * prm.out_stride_head + row * prm.out_stride_row;
  for_each_key([&](int64_t b, uint64_t key) {
    if (key >= threshold) out[offset++ * prm.out_stride_col] = static_cast<int32_t>(b);
  });
  for (int64_t c = kept + tid; c < prm.out_cols; c += kSelectThreads) {
    out[c * prm.out_stride_col] = -1;
  }
  __syncthreads();  // warp_sums and hist are reused by the caller's next row
}

// Keys per thread of the select kernel instance for a block table of more than kSelectThreads
// columns.
inline int select_keys_per_thread(int64_t max_blocks) {
  const int64_t per_thread = (max_blocks + kSelectThreads - 1) / kSelectThreads;
  return per_thread <= 4 ? 4 : per_thread <= 8 ? 8 : kSelectKeysPerThread;
}

// One CTA per (row, head); tables of more than kSelectThreads columns.
template <int kKeys>
__global__ void __launch_bounds__(kSelectThreads) index_select_kernel(const IndexSelectParams prm) {
  __shared__ SelectSmem sm;
  select_row_topk<kKeys>(prm, blockIdx.x, blockIdx.y, sm);
}

// One CTA per (row, head); tables of at most kSelectThreads columns. A kernel of its own, so that
// its code is the rank path's alone: one select CTA runs with cold instruction caches at the end
// of the index call, and its warps spent 46% of their stalled cycles waiting for instructions at
// 32K x 1 while the path was one branch of the wide-table kernel (Nsight Compute,
// bench/results/2026-12-01-select-tournament-rolled/).
__global__ void __launch_bounds__(kSelectThreads)
    index_select_narrow_kernel(const IndexSelectParams prm) {
  __shared__ SelectSmem sm;
  select_row_topk_by_rank(prm, blockIdx.x, blockIdx.y, sm);
}

// 8 consecutive key elements -> floats. bf16 keys come as one 16-byte load, e4m3 as 8 bytes.
__device__ __forceinline__ void key8_to_float(uint4 raw, float* f) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

__device__ __forceinline__ void key8_to_float(uint2 raw, float* f) {
  const uint32_t w[2] = {raw.x, raw.y};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>(w[i] >> (16 * j)), __NV_E4M3);
      const float2 v = __half22float2(__half2(h));
      f[4 * i + 2 * j] = v.x;
      f[4 * i + 2 * j + 1] = v.y;
    }
  }
}

template <typename CacheT>
struct IndexKeyLoad;
template <>
struct IndexKeyLoad<__nv_bfloat16> {
  using Raw = uint4;
};
template <>
struct IndexKeyLoad<uint8_t> {
  using Raw = uint2;
};

// One CTA scores up to kMaxScoreBlocks consecutive blocks (blockIdx.y) for one tile of rows
// (blockIdx.x). Every index key is loaded once and dotted with all (row, head) query vectors of
// the tile, which sit in shared memory as floats. A warp handles 16-key tiles (4 lane groups x
// KPI keys); each key is split over the 8 lanes of its group in 8-element units, reduced with a
// fixed xor butterfly, so the fp32 result is the same on every run. Block maxima are exact, so
// the shared-memory integer atomicMax over ordered floats is deterministic.
template <typename CacheT, int UPL>
__global__ void __launch_bounds__(kScoreThreads, 2) index_score_kernel(const IndexScoreParams prm) {
  if (prm.early_select) allow_dependent_launch();
  using Raw = typename IndexKeyLoad<CacheT>::Raw;
  constexpr int KPI = UPL <= 2 ? 4 : 2;  // keys per lane group per tile (registers: KPI*UPL*8)
  constexpr int kTileKeys = 4 * KPI;     // divides 16, hence every block size
  __shared__ __align__(16) float q_s[kMaxScoreRowHeads * kMaxIndexDim];
  __shared__ uint32_t block_max[kMaxScoreBlocks * kMaxScoreRowHeads];
  __shared__ int32_t s_page[kMaxScoreBlocks];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane & 7, grp = lane >> 3;
  const int H = prm.num_heads, Di = prm.head_dim, units = Di / 8;
  const int64_t bs = prm.rows.block_size;
  const int64_t T = prm.rows.num_rows;
  const int64_t max_blocks = prm.rows.max_blocks;
  const int64_t tile_start = static_cast<int64_t>(blockIdx.x) * prm.rows_per_tile;
  const int64_t tile_end = min(T, tile_start + prm.rows_per_tile);
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * prm.blocks_per_cta;
  const int tiles_per_block = static_cast<int>(bs / kTileKeys);
  const CacheT* cache = static_cast<const CacheT*>(prm.cache);

  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    check_cu_seqlens(prm.rows, prm.error_flags);
  }
  for (int64_t row0 = tile_start; row0 < tile_end;) {
    const RowInfo info = resolve_row(
        prm.rows, row0, (threadIdx.x == 0 && blockIdx.y == 0) ? prm.error_flags : nullptr);
    const int64_t row1 = min(info.seg_end, tile_end);
    const int64_t max_pos = info.pos_base + row1 - 1;  // the segment's last row sees the most
    if (info.req < 0 || max_pos < b0 * bs) {
      row0 = row1;
      continue;
    }
    const int nrh = static_cast<int>(row1 - row0) * H;
    const int nblk = static_cast<int>(min(b0 + prm.blocks_per_cta, max_pos / bs + 1) - b0);

    __syncthreads();  // the previous segment is done with q_s and block_max
    for (int i = threadIdx.x; i < nrh * Di; i += kScoreThreads) {
      const int rh = i / Di, d = i - rh * Di;
      const int64_t row = row0 + rh / H;
      q_s[rh * Di + d] = load_as_float(
          prm.index_q, prm.q_dtype,
          row * prm.q_stride_row + (rh % H) * prm.q_stride_head + d * prm.q_stride_dim);
    }
    for (int i = threadIdx.x; i < nblk * nrh; i += kScoreThreads) {
      block_max[i] = ordered_f32(-INFINITY);
    }
    for (int i = threadIdx.x; i < nblk; i += kScoreThreads) {
      s_page[i] = prm.block_table[info.req * prm.bt_stride_req + (b0 + i) * prm.bt_stride_block];
    }
    __syncthreads();

    const int ntiles = nblk * tiles_per_block;
    for (int ti = warp; ti < ntiles; ti += kScoreWarps) {
      const int bl = ti / tiles_per_block;
      const int64_t b = b0 + bl;
      const int64_t in_block = static_cast<int64_t>(ti - bl * tiles_per_block) * kTileKeys;
      const int64_t key0 = b * bs + in_block;
      if (key0 > max_pos) continue;  // warp-uniform: no row of the segment sees these keys
      const int32_t page = s_page[bl];
      if (page < 0 || page >= prm.num_cache_blocks) {
        if (lane == 0 && in_block == 0) raise_error(prm.error_flags, kDeviceErrorBlockId);
        continue;  // the block keeps score -inf
      }
      const CacheT* kbase =
          cache + page * prm.cache_stride_page + (in_block + grp * KPI) * prm.cache_stride_key;
      Raw raw[KPI][UPL];
#pragma unroll
      for (int k = 0; k < KPI; ++k) {
#pragma unroll
        for (int i = 0; i < UPL; ++i) {
          const int u = sub + 8 * i;
          if (u < units) {
            raw[k][i] =
                __ldg(reinterpret_cast<const Raw*>(kbase + k * prm.cache_stride_key + u * 8));
          }
        }
      }
      for (int rh = 0; rh < nrh; ++rh) {
        const float* qr = q_s + rh * Di;
        float qv[UPL * 8];
#pragma unroll
        for (int i = 0; i < UPL; ++i) {
          const int u = sub + 8 * i;
          float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
          if (u < units) {
            lo = *reinterpret_cast<const float4*>(qr + u * 8);
            hi = *reinterpret_cast<const float4*>(qr + u * 8 + 4);
          }
          qv[i * 8 + 0] = lo.x;
          qv[i * 8 + 1] = lo.y;
          qv[i * 8 + 2] = lo.z;
          qv[i * 8 + 3] = lo.w;
          qv[i * 8 + 4] = hi.x;
          qv[i * 8 + 5] = hi.y;
          qv[i * 8 + 6] = hi.z;
          qv[i * 8 + 7] = hi.w;
        }
        const int64_t pos = info.pos_base + row0 + rh / H;
        float m = -INFINITY;
#pragma unroll
        for (int k = 0; k < KPI; ++k) {
          // Keys are converted here rather than once per tile: keeping only the raw words live
          // halves the registers, and the conversion is one integer op per bf16 element.
          float acc = 0.0f;
#pragma unroll
          for (int i = 0; i < UPL; ++i) {
            if (sub + 8 * i < units) {
              float kf[8];
              key8_to_float(raw[k][i], kf);
#pragma unroll
              for (int e = 0; e < 8; ++e) acc = fmaf(qv[i * 8 + e], kf[e], acc);
            }
          }
          acc += __shfl_xor_sync(0xFFFFFFFFu, acc, 1);
          acc += __shfl_xor_sync(0xFFFFFFFFu, acc, 2);
          acc += __shfl_xor_sync(0xFFFFFFFFu, acc, 4);
          if (isnan(acc)) acc = -1e30f;  // spec A12
          if (key0 + grp * KPI + k <= pos) m = fmaxf(m, acc);
        }
        m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 8));
        m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 16));
        if (lane == (rh & 31)) atomicMax(&block_max[bl * nrh + rh], ordered_f32(m));
      }
    }
    __syncthreads();
    allow_dependent_launch();  // the select kernel may start; it waits for the writes below
    for (int i = threadIdx.x; i < nblk * nrh; i += kScoreThreads) {
      const int bl = i / nrh, rh = i - bl * nrh;
      const int64_t row = row0 + rh / H;
      const int64_t pos = info.pos_base + row;
      const int64_t b = b0 + bl;
      if (pos >= 0 && b <= pos / bs) {
        prm.scores[((rh % H) * T + row) * max_blocks + b] = unordered_f32(block_max[i]);
      }
    }
    row0 = row1;
  }
}

// ---- Tensor-core scorer (head dim a multiple of 64) ----
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
// makes a thread's own copies visible to it. On the H200 that took the head-dim-64 balanced calls
// 5-11% faster (128K x 64 162.3 -> 147.6 us); at head dim 128, whose register double buffer
// already keeps a 4 KB tile per warp in flight, the ring was 7-10% slower (128K x 64 256.8 ->
// 281.9), as were L2 prefetches of tiles ahead (bench/results/2026-11-30-index-key-ring-ab/,
// 2026-11-30-rejected-index-l2-tile-prefetch/).
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

// The nrh (row, head) query vectors of the segment starting at row0 -> q_s as bf16 (or f16, for
// e4m3 queries on the f16 path) MMA fragments, n-tiles padded with zero vectors. Element i = rh *
// Di + d goes to thread i % 256. Loads are issued 4 at a time before any is used (indices clamped
// into the segment, padding zeroed after), so a decode request's queries cost one round trip
// ("Issuing loads" in common.cuh).
template <typename OutT>
__device__ __forceinline__ OutT round_to(float v) {
  if constexpr (std::is_same_v<OutT, __half>) {
    return __float2half_rn(v);
  } else {
    return __float2bfloat16_rn(v);
  }
}

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

// In-cluster top-k of decode request blockIdx.x (its rows are one segment), after its score
// CTAs, chunk c = cluster rank c = blockIdx.y, left their block maxima in block_max ([block in
// chunk][row-head]): CTA c selects row-heads c, c + chunks, ..., its thread b reading block b's
// maximum from the shared memory of the CTA that scored it. Only visible blocks are read, and
// every CTA that owns one scored it (a CTA skips its chunk only when no row of the request sees
// any of its blocks). The keys and the selection are those of the select kernel, so both paths
// write the same bits. The tile bounds are recomputed here rather than kept live across the
// scoring loop, whose registers are at the kernel's limit.
__device__ void cluster_select_topk(const IndexScoreParams& prm, const IndexSelectParams& sel,
                                    const uint32_t* block_max, SelectSmem& sm) {
  static_assert(kScoreThreads == kSelectThreads,
                "write_row_topk_by_rank (rank count, warp tournament) runs on select-kernel CTAs");
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every CTA's block maxima are final
  const int H = prm.num_heads;
  const int64_t tile_start = static_cast<int64_t>(blockIdx.x) * prm.rows_per_tile;
  const int64_t tile_end = min(prm.rows.num_rows, tile_start + prm.rows_per_tile);
  const int nrh = static_cast<int>(tile_end - tile_start) * H;
  const int tid = threadIdx.x;
  const int bpc = prm.blocks_per_cta;
  const RowInfo info = resolve_row(prm.rows, tile_start, nullptr);
  for (int rh = blockIdx.y; rh < nrh; rh += gridDim.y) {
    const int64_t row = tile_start + rh / H;
    const int64_t nvb = visible_blocks(info, info.pos_base + row, prm.rows.block_size);
    float raw = 0.0f;
    if (tid < nvb) {
      raw = unordered_f32(cluster.map_shared_rank(
          block_max, static_cast<unsigned>(tid / bpc))[(tid % bpc) * nrh + rh]);
    }
    write_row_topk_by_rank(sel, row, rh % H, raw, nvb, sm);
  }
  cluster.sync();  // no CTA may exit while another still reads its shared memory
}

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

  auto fill_queries = [&](int64_t row0, int nrh) {
    if constexpr (kF16) {
      // e4m3 queries (the launcher's rule)
      fill_query_fragments<uint8_t, CH, Load::kLaneElems>(prm, row0, nrh, q_s);
    } else if (prm.q_dtype == DType::kBF16) {
      fill_query_fragments<__nv_bfloat16, CH, Load::kLaneElems>(prm, row0, nrh, q_s);
    } else {
      fill_query_fragments<uint8_t, CH, Load::kLaneElems>(prm, row0, nrh, q_s);
    }
  };
  // Scores blocks [b0, b0 + bpc) of row tile `tile` (bpc <= kMaxPieceBlocks); `report`: this CTA
  // reports the tile's bad lengths (the one that scores its first block).
  auto score_piece = [&](int64_t tile, int64_t b0, int bpc, bool report) {
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
      for (int i = threadIdx.x; i < nblk * nrh; i += kScoreThreads) {
        block_max[i] = ordered_f32(-INFINITY);
      }
      __syncthreads();

      // A warp's tiles are (bl, tin): 16 kM-key tile tin of the chunk's block bl, stepping by
      // kScoreWarps tiles with 32-bit counters; offsets within a page are 32-bit (the launcher
      // bounds block_size x key stride), so a tile's addresses cost one 64-bit page base.
      struct TilePos {
        int bl, tin;
      };
      auto advance = [&](TilePos p) {
        p.tin += kScoreWarps;
        while (p.tin >= tiles_per_block) {
          p.tin -= tiles_per_block;
          ++p.bl;
        }
        return p;
      };
      // Chunk-relative keys past key_limit are seen by no row (a chunk's keys fit in 32 bits).
      const int bsi = static_cast<int>(bs);
      const int key_limit = static_cast<int>(min(max_pos - b0 * bs, int64_t{nblk} * bsi));
      // A tile's key fragments, or false when the warp skips it (no row of the segment sees its
      // keys, or its page id is bad: the block keeps score -inf). The loop below keeps the next
      // tile's loads in flight while it multiplies the current one (a register double buffer).
      struct Frag {
        uint4 r[kM][CH][Load::kLoads][2];  // [m-tile][chunk][j][key 16m + g, key 16m + g + 8]
      };
      auto load_tile = [&](TilePos tp, Frag& raw) -> bool {
        if (tp.bl >= nblk) return false;
        const int in_block = tp.tin * 16 * kM;
        if (tp.bl * bsi + in_block > key_limit) return false;  // warp-uniform
        const int32_t page = s_page[tp.bl];
        if (page < 0 || page >= prm.num_cache_blocks) {
          if (lane == 0 && in_block == 0) raise_error(prm.error_flags, kDeviceErrorBlockId);
          return false;
        }
        const CacheT* kbase =
            cache + page * prm.cache_stride_page + (in_block * key_stride + lane_key);
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
      };
      TilePos tp{warp / tiles_per_block, warp % tiles_per_block};
      Frag fa;
      bool have = false;
      // The static and in-cluster grids issue the warp's first tile before computing the
      // visibility limits; the balanced grid computes the limits first. That order took the
      // head-dim-128 e4m3 16-key-tile instances 1% faster on the H200 (128K x 64 300.5 -> 297.4
      // us; bench/results/2026-11-30-index-bf16-balanced-ab/, variant H), and the 32-key-tile
      // instance that replaced them was timed with it.
      if constexpr (kGrid != ScoreGrid::kBalanced) have = load_tile(tp, fa);
      // Chunk-relative key k of the lane's row g is seen by query 2t (2t + 1) of n-tile n iff
      // k <= limit(n, 0) (limit(n, 1)); the lane's g is already subtracted, and the clamp to
      // [-1, chunk keys] decides the same. The one-n-tile instances keep the two limits in
      // registers; the four-n-tile ones recompute them per tile: eight more live registers made
      // the bf16 ones spill and run up to 1.7x slower
      // (bench/results/2026-11-30-index-loop-pingpong-ab/).
      constexpr bool kHoistLimits = kNTiles == 1;
      auto limit = [&](int n, int q) {
        const int64_t pos = info.pos_base + row0 + (n * 8 + 2 * tq + q) / H;
        return static_cast<int>(max(int64_t{-1}, min(pos - b0 * bs, int64_t{nblk} * bsi))) - g;
      };
      int lim[kNTiles][2];
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
        for (int q = 0; q < 2; ++q) lim[n][q] = kHoistLimits ? limit(n, q) : 0;
      }
      if constexpr (kGrid == ScoreGrid::kBalanced && !kKeyRing) have = load_tile(tp, fa);
      // Scores the tile at p from its fragments into the block maxima.
      auto score_tile = [&](TilePos p, const Frag& raw) {
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
      };
      if constexpr (kKeyRing) {
        // The ring (key_ring_bytes): tile i sits in stage i % kKeyRingStages; each iteration
        // first issues the tile kKeyRingStages - 1 ahead into the stage of tile i - 1 (read into
        // registers last iteration), then waits for tile i. Every iteration commits one group,
        // empty when its tile is skipped, so "all but the newest kKeyRingStages - 1 groups" is
        // always tile i.
        extern __shared__ uint4 key_ring[];
        constexpr int kWords = key_ring_words<CH, kM>();
        uint4* ring = key_ring + warp * (kKeyRingStages * kWords * 32) + lane;
        // load_tile's skips and checks, then copies instead of loads. (One lambda for the checks
        // of both changed the machine code of every scorer, which was not timed.)
        auto issue = [&](TilePos tq, int stage) -> bool {
          if (tq.bl >= nblk) return false;
          const int in_block = tq.tin * 16 * kM;
          if (tq.bl * bsi + in_block > key_limit) return false;  // warp-uniform
          const int32_t page = s_page[tq.bl];
          if (page < 0 || page >= prm.num_cache_blocks) {
            if (lane == 0 && in_block == 0) raise_error(prm.error_flags, kDeviceErrorBlockId);
            return false;
          }
          const CacheT* kbase =
              cache + page * prm.cache_stride_page + (in_block * key_stride + lane_key);
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
        };
        uint32_t have_mask = 0;  // bit s: the tile in stage s is being copied
        TilePos tq = tp;
#pragma unroll
        for (int st = 0; st < kKeyRingStages - 1; ++st) {
          if (issue(tq, st)) have_mask |= 1u << st;
          cp_async_commit();
          tq = advance(tq);
        }
        int stage = 0;
        while (tp.bl < nblk) {
          const int ahead = stage == 0 ? kKeyRingStages - 1 : stage - 1;
          have_mask &= ~(1u << ahead);
          if (issue(tq, ahead)) have_mask |= 1u << ahead;
          cp_async_commit();
          tq = advance(tq);
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
          tp = advance(tp);
          stage = stage == kKeyRingStages - 1 ? 0 : stage + 1;
        }
        cp_async_wait<0>();  // the next piece refills the ring from stage 0
      } else if constexpr (kGrid == ScoreGrid::kBalanced) {
        // Two named buffers that swap roles every tile (the loop is unrolled by two), so the
        // double buffer costs no register copies. The balanced grid runs it (with bf16 keys the
        // copying loop spills there); in the same A/B the static and in-cluster e4m3 kernels
        // were up to 9% faster with the copying loop below, and static bf16 ones (with hoisted
        // limits) up to 5%
        // (bench/results/2026-11-30-index-loop-pingpong-ab/); the static 32-key instance was too
        // (bench/results/2026-11-30-index-m2-tiles-ab/, call 4).
        Frag fb;
        while (tp.bl < nblk) {
          TilePos tn = advance(tp);
          bool have_next = load_tile(tn, fb);
          if (have) score_tile(tp, fa);
          tp = tn;
          have = have_next;
          if (tp.bl >= nblk) break;
          tn = advance(tp);
          have_next = load_tile(tn, fa);
          if (have) score_tile(tp, fb);
          tp = tn;
          have = have_next;
        }
      } else {
        while (tp.bl < nblk) {
          Frag next;
          const TilePos tp_next = advance(tp);
          const bool have_next = load_tile(tp_next, next);
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
        for (int i = threadIdx.x; i < nblk * nrh; i += kScoreThreads) {
          const int bl = i / nrh, rh = i - bl * nrh;
          const int64_t row = row0 + rh / H;
          const int64_t pos = info.pos_base + row;
          const int64_t b = b0 + bl;
          if (pos >= 0 && b <= pos / bs) {
            prm.scores[((rh % H) * T + row) * max_blocks + b] = unordered_f32(block_max[i]);
          }
        }
      }
      row0 = row1;
    }
  };
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
