// The indexer's exact top-k selection (spec A3): selection keys, the rank count, the warp
// tournament, candidate sets and the radix descent: the device steps of the select kernels
// (launch.cu), the in-cluster selection and the persistent decode step.
#pragma once

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/index/params.cuh"
#include "cuda/row_map.cuh"

namespace msa {
namespace cuda {

// Total order of spec A3 as one 64-bit key: tier (init 2 > local 1 > scored 0) in bits 62-63,
// the ordered score in bits 30-61 (forced tiers use 0, so they tie), and 0x3FFFFFFF - block in
// bits 0-29 so that equal scores go to the lower block id. Keys are distinct per block.
// s is block b's score (b < 2^30, check_supported); blocks below init_blocks are forced init,
// those from local_start (the row's visible block count minus local_blocks) forced local. Built
// from two 32-bit halves with selects and no branch: the wide select kernel builds up to 16 keys
// per thread while its CTA runs alone on its SM, where the branchy form (a convergence region per
// tier test) was expensive per key (bench/EXPERIMENTS.md: 2026-12-01-select-key-build).
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
// one register quadruple and waited for every load in turn (bench/EXPERIMENTS.md:
// 2026-11-30-index-select-rank-batch-ab). Entries from n to the next multiple of 16 are read
// (inside the array) and masked.
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
// calls (64 columns) were slower, the 32K ones (256 columns) faster (bench/EXPERIMENTS.md:
// 2026-12-01-select-tournament-rolled).
constexpr int64_t kTournamentMinBlocks = 64;

// The kept-th largest of the CTA's keys (one per thread, 0 for none; keys distinct where
// nonzero), for 1 <= kept <= kTournamentKeys, by every thread of the CTA: each warp sorts its 32
// keys with a bitonic network of shuffles and offers its 16 largest, then warps merge pairs of
// sorted lists (the larger of A[i] and B[15 - i] is a bitonic sequence holding their 16
// largest, which a four-stage bitonic merge sorts) until one list is left: 15 + 3 x 4 shuffle
// stages and four CTA barriers, against the rank count's 256 x 256 comparisons through shared
// memory at 256 columns. The loops stay rolled: the select kernel runs alone on its SM with cold
// instruction caches, where its warps mostly wait for instructions, and unrolled the network was
// slower than these loops and no faster than the count (bench/EXPERIMENTS.md:
// 2026-12-01-select-tournament-rolled). Uses sm.keys; returns after a barrier, so sm.keys may be
// reused at once.
inline __device__ uint64_t tournament_threshold(uint64_t key, int64_t kept, SelectSmem& sm) {
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
  // four (bench/EXPERIMENTS.md: 2026-12-01-select-key-build). Slices start on 16-key boundaries
  // (16-byte loads in count_above).
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
inline __device__ void write_row_topk_by_rank(const IndexSelectParams& prm, int64_t row, int64_t h,
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
inline __device__ void select_row_topk_by_rank(const IndexSelectParams& prm, int64_t row, int64_t h,
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

// Prefill tables of at most kWarpSelectMaxBlocks columns are selected by one warp per (row,
// head): a prefill row sees on average half its table, and a CTA per row (the decode kernels'
// form, sized for one row per SM) spent most of the prefill index call ranking columns with
// 256 threads (bench/IDEAS.md: the index stage at 16K was half the select).
constexpr int kWarpSelectMaxBlocks = 1024;
// Candidate slots per warp for the warp select (warp_kth_by_candidates): unordered scores bring
// about 20 keys to its bound at top-16 (about 1.3 x kept at 4-32 keys per lane), scores ordered by
// block id exactly kept; rows with more candidates take the rounds over every key.
constexpr int kWarpCandidates = 64;

// The kept-th largest of the warp's keys (keys[] per lane, 0: absent; distinct), for 1 <= kept
// <= 32 and at least kept lanes holding a key, or 0 when more than kWarpCandidates keys reach the
// bound below. The kept-th largest lane maximum is a lower bound (kept lanes hold a key at or
// above it); the keys that reach it are gathered in `cand` (the warp's kWarpCandidates slots in
// shared memory) in ascending (i, lane) order, *n of them, and ranked by counting the larger
// ones: kept warp maxima over one value per lane plus a rank over about 1.3 x kept candidates,
// instead of kept rounds that each rescan a lane's P keys (issue-bound at 16-32 keys per lane).
template <int P>
__device__ uint64_t warp_kth_by_candidates(const uint64_t (&keys)[P], int kept,
                                           const uint64_t* cand, int* n_out) {
  const int lane = threadIdx.x & 31;
  uint64_t cur = keys[0];
#pragma unroll
  for (int i = 1; i < P; ++i) cur = keys[i] > cur ? keys[i] : cur;
  uint64_t bound = 0;
  for (int t = 0; t < kept; ++t) {
    bound = warp_max_key(cur);
    if (cur == bound) cur = 0;
  }
  const uint32_t below = (1u << lane) - 1u;
  const auto base = static_cast<uint32_t>(__cvta_generic_to_shared(cand));
  int n = 0;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const bool take = keys[i] >= bound;
    const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, take);
    const int slot = n + __popc(ballot & below);
    st_shared_u64_if(take && slot < kWarpCandidates, base + 8u * static_cast<uint32_t>(slot),
                     keys[i]);
    n += __popc(ballot);
  }
  __syncwarp();  // every lane's candidates are written before any lane reads them
  *n_out = n;
  if (n > kWarpCandidates) return 0;
  if (n == kept) return bound;  // the bound is a key, and the smallest of the kept ones
  uint64_t found = 0;
  for (int j = lane; j < n; j += 32) {
    const uint64_t c = cand[j];
    int above = 0;
#pragma unroll 4
    for (int k = 0; k < n; ++k) above += cand[k] > c ? 1 : 0;
    if (above == kept - 1) found = c;
  }
  return warp_max_key(found);  // exactly one candidate has kept - 1 above it
}

// The block id of a selection key (its low 30 bits hold 0x3FFFFFFF - id).
__device__ __forceinline__ int32_t selection_key_block(uint64_t key) {
  return static_cast<int32_t>(0x3FFFFFFFu - (static_cast<uint32_t>(key) & 0x3FFFFFFFu));
}

// The kept blocks of one (row, head) of a prefill table of at most 32 * P columns, written in
// ascending id order with -1 padding, by the calling warp alone. Lane l holds columns l + 32 i:
// the score loads are coalesced and ascending (i, lane) is ascending id order. The kept-th
// largest key comes from warp_kth_by_candidates, whose candidates in ascending id order hold the
// kept blocks; where that does not apply (kept > 32, or too many candidates) from kept rounds of
// a warp max over each lane's largest key not yet taken (keys are distinct, so each round takes
// exactly one key), and the kept blocks from a pass over every key. The same keys and total order
// as the CTA selects (spec A3), hence the same output. `cand`: the warp's kWarpCandidates slots
// in shared memory.
template <int P>
__device__ void select_row_topk_warp(const IndexSelectParams& prm, int64_t row, int64_t h,
                                     uint64_t* cand) {
  const int lane = threadIdx.x & 31;
  const int64_t T = prm.rows.num_rows;
  const int64_t max_blocks = prm.rows.max_blocks;
  // The row's request comes from this call's inputs, which the stream finished writing before
  // the score kernel started: resolved before the wait, so only the score loads follow it.
  const RowInfo info = resolve_row(prm.rows, row, nullptr);
  // Below 32 * P <= kWarpSelectMaxBlocks, so 32-bit column arithmetic holds.
  const auto nvb = static_cast<int32_t>(
      min(visible_blocks(info, info.pos_base + row, prm.rows.block_size), max_blocks));
  wait_for_prior_grid();  // the scores come from the score kernel
  const float* scores = prm.scores + (h * T + row) * max_blocks + lane;
  float raw[P];
#pragma unroll
  for (int i = 0; i < P; ++i) raw[i] = lane + 32 * i < nvb ? __ldcg(scores + 32 * i) : 0.0f;
  const int32_t kept = min(prm.topk, nvb);
  const int32_t local_start = nvb - prm.local_blocks;
  uint64_t keys[P];  // 0: not visible (a visible block's key is never 0: its id bits are not)
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int32_t col = lane + 32 * i;
    const uint64_t key = selection_key(raw[i], col, prm.init_blocks, local_start);
    keys[i] = col < nvb ? key : 0;
  }
  int32_t* out = prm.out + h * prm.out_stride_head + row * prm.out_stride_row;
  const uint32_t below = (1u << lane) - 1u;
  uint64_t threshold = 1;  // every visible key
  int n = 0;               // > 0: the kept blocks are the n candidates that reach threshold
  if (nvb > kept) {
    // nvb > kept lanes' worth of keys: min(nvb, 32) >= kept lanes hold one when kept <= 32.
    threshold = kept <= 32 ? warp_kth_by_candidates(keys, kept, cand, &n) : 0;
    if (threshold == 0) {
      n = 0;
      uint64_t cur = largest_below(keys, ~0ull);
      for (int t = 0; t < kept; ++t) {
        threshold = warp_max_key(cur);
        if (cur == threshold) cur = largest_below(keys, threshold);
      }
    }
  }
  if (n > 0) {
    int base = 0;
    for (int j0 = 0; j0 < n; j0 += 32) {
      const int j = j0 + lane;
      const uint64_t c = j < n ? cand[j] : 0;
      const bool keep = c >= threshold;  // false for 0 (threshold >= 1)
      const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, keep);
      if (keep) out[(base + __popc(ballot & below)) * prm.out_stride_col] = selection_key_block(c);
      base += __popc(ballot);
    }
    __syncwarp();  // the candidate slots are free again once every lane has read them
  } else {
    int64_t base = 0;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const bool keep = keys[i] >= threshold;  // false for 0 (threshold >= 1)
      const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, keep);
      if (keep) out[(base + __popc(ballot & below)) * prm.out_stride_col] = lane + 32 * i;
      base += __popc(ballot);
    }
  }
  for (int64_t c = kept + lane; c < prm.out_cols; c += 32) out[c * prm.out_stride_col] = -1;
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
  // branch on the loaded length) put a cold load on the path of every select CTA launched after
  // the score grid's last CTA (bench/EXPERIMENTS.md: 2026-12-01-select-key-build).
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

}  // namespace cuda
}  // namespace msa
