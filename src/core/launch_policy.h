// Launch policy of the CUDA decode path as pure host functions of the problem's shape and the
// device's SM count: how the indexer's blocks are cut among CTAs and how sparse attention is
// split along its selected blocks; which prefill calls take the tensor-core kernels by default;
// and which decode steps run as one persistent kernel. Nothing here reads device memory or calls
// CUDA, so the decisions are unit-tested on the CPU (and the exact-coverage helpers below are
// what the kernels compute from blockIdx).
//
// Grids depend on shapes and capacities only, never on the values in device tensors, so a
// captured CUDA graph replays correctly when the batch contents change.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "msa/cache.h"
#include "msa/types.h"

// The balanced indexer mapping's helpers run in the score kernel too.
#if defined(__CUDACC__)
#define MSA_POLICY_HD __host__ __device__ __forceinline__
#else
#define MSA_POLICY_HD inline
#endif

namespace msa {
namespace detail {

// ---- Indexer (index scores + top-k) ----

// Blocks of one row tile a score CTA may own (its block maxima and page ids sit in shared memory).
constexpr int kIndexMaxBlocksPerCta = 32;

struct IndexLaunchPlan {
  int64_t row_tiles = 0;   // grid.x: decode: one request; prefill: a tile of rows
  int blocks_per_cta = 1;  // consecutive blocks of the tile owned by one CTA
  int64_t chunks = 0;      // grid.y = ceil(max_blocks / blocks_per_cta)
  // The chunks of a row tile are one thread-block cluster (cluster y = chunks) that selects its
  // rows' top-k from the block maxima in its CTAs' shared memory: no select kernel.
  bool cluster_select = false;
  // The select kernel is a dependent launch (programmatic, sm_90) that may start once every score
  // CTA has started (true) or once each has scored its blocks (false); either way it waits for
  // the scores before reading them.
  bool early_select = false;
  // > 0: a decode grid of balanced_ctas CTAs (grid (1, balanced_ctas)) instead of row_tiles x
  // chunks. The CTAs read every request's length and take equal shares of the requests' visible
  // blocks (balanced_share over balanced_units), each share scored in pieces of up to
  // balanced_piece_blocks blocks of one request.
  int64_t balanced_ctas = 0;
};

// Requests a balanced grid can map (the score CTA keeps their prefix sums in shared memory).
constexpr int64_t kIndexBalancedMaxRequests = 1024;

// A balanced CTA scores its share in pieces of whole blocks of one request; between pieces its
// warps meet at a barrier, write the piece's block maxima and start their key loads afresh, so
// the pieces are as long as the CTA's shared memory allows: block maxima for
// kIndexScoreMaxBlockHeads (block, row-head) pairs and page ids for at most
// kIndexBalancedMaxPieceBlocks blocks. With 32-block pieces the restarts were a large share of
// the warps' time (bench/EXPERIMENTS.md: 2026-11-30-2d60c8a-ncu-e4m3); longer pieces are faster
// (2026-11-30-index-balanced-long-pieces-ab).
constexpr int kIndexScoreMaxBlockHeads = 1024;
constexpr int kIndexBalancedMaxPieceBlocks = 256;

// Blocks per piece of a balanced grid whose requests have `row_heads` (row, head) query vectors
// (decode rows x index heads, 1..32): at least kIndexMaxBlocksPerCta.
MSA_POLICY_HD int32_t balanced_piece_blocks(int64_t row_heads) {
  const int64_t fit = kIndexScoreMaxBlockHeads / (row_heads < 1 ? 1 : row_heads);
  return static_cast<int32_t>(fit < kIndexBalancedMaxPieceBlocks ? fit
                                                                 : kIndexBalancedMaxPieceBlocks);
}

// Blocks [begin, end).
struct BlockRange {
  int64_t begin = 0, end = 0;
};

// Every piece of a balanced CTA after its first costs it about as long as streaming this many
// more key bytes: the CTA's warps meet, write the piece's block maxima, load the next request's
// queries and page ids and refill their key pipelines: the measured lag of a CTA whose share
// straddled two requests, bf16 and e4m3 keys alike, expressed as the key bytes a CTA streams in
// that time (bench/EXPERIMENTS.md: 2026-12-01-index-balanced-lead-units).
constexpr int64_t kIndexBalancedRestartBytes = 64 * 1024;
// At most this many lead units per request (blocks of 1 KB and less); it also bounds the prefix
// sums (plan_index_launch).
constexpr int32_t kIndexBalancedMaxLeadUnits = 64;

// Lead units: units a request puts in front of its blocks in the balanced mapping, which stand
// for the restart of the CTA that reaches the request from the one before, so that a share
// which straddles two requests holds that many fewer blocks. kIndexBalancedRestartBytes in
// blocks of block_bytes key bytes (bf16 keys at M3's 128 x 128: 2; e4m3: 4).
MSA_POLICY_HD int32_t balanced_lead_units(int64_t block_bytes) {
  if (block_bytes <= 0) return 0;
  const int64_t units = (kIndexBalancedRestartBytes + block_bytes / 2) / block_bytes;
  return static_cast<int32_t>(units < kIndexBalancedMaxLeadUnits ? units
                                                                 : kIndexBalancedMaxLeadUnits);
}

// The units a request contributes to the balanced mapping: `lead` lead units, then its visible
// blocks (ceil(len / block_size), at most max_blocks), or one for a request with none, so that one
// CTA still resolves it (and reports a bad length) as chunk 0 of the static grid does.
MSA_POLICY_HD int64_t balanced_units(int64_t len, int64_t block_size, int64_t max_blocks,
                                     int32_t lead) {
  const int64_t visible = len > 0 ? (len + block_size - 1) / block_size : 0;
  return lead + (visible < 1 ? 1 : (visible > max_blocks ? max_blocks : visible));
}

// The units [begin, end) of `total` owned by CTA `cta` of `ctas` (shares differ by at most one).
MSA_POLICY_HD BlockRange balanced_share(int64_t total, int64_t ctas, int64_t cta) {
  return BlockRange{total * cta / ctas, total * (cta + 1) / ctas};
}

// A balanced CTA walks its share request by request, in pieces of at most piece_blocks
// (balanced_piece_blocks) blocks: the piece at cursor (tile, b0) is blocks [b0, b0 + bpc) of
// request `tile`. `ends` holds the inclusive prefix sums of the nreq requests' units (request r
// owns units [ends[r - 1], ends[r]): `lead` lead units, then one per block). balanced_first gives
// the first cursor of a share, balanced_piece the piece at a cursor and the cursor after it, or
// false once the share has no more blocks. A share may hold lead units only, and no piece.
struct BalancedCursor {
  int32_t tile = 0, b0 = 0;
};
MSA_POLICY_HD BalancedCursor balanced_first(const int32_t* ends, int32_t nreq, BlockRange share,
                                            int32_t lead) {
  int32_t lo = 0, hi = nreq;  // the first request whose units end past the share's start
  while (lo < hi) {
    const int32_t mid = (lo + hi) / 2;
    if (ends[mid] > share.begin) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  const int64_t blocks_start = (lo == 0 ? 0 : ends[lo - 1]) + lead;
  return BalancedCursor{lo, lo < nreq && share.begin > blocks_start
                                ? static_cast<int32_t>(share.begin - blocks_start)
                                : 0};
}
MSA_POLICY_HD bool balanced_piece(const int32_t* ends, int32_t nreq, BlockRange share,
                                  int32_t piece_blocks, int32_t lead, BalancedCursor at,
                                  int32_t* bpc, BalancedCursor* next) {
  if (at.tile >= nreq) return false;
  const int64_t start = at.tile == 0 ? 0 : ends[at.tile - 1];
  if (start >= share.end) return false;
  const int64_t end = ends[at.tile] < share.end ? ends[at.tile] : share.end;
  // Blocks of the request before the share's end (<= 0: it ends among the lead units).
  const auto limit = static_cast<int32_t>(end - start - lead);
  if (at.b0 >= limit) return false;  // no block left in the share
  const bool more = at.b0 + piece_blocks < limit;
  *bpc = more ? piece_blocks : limit - at.b0;
  *next = more ? BalancedCursor{at.tile, at.b0 + piece_blocks} : BalancedCursor{at.tile + 1, 0};
  return true;
}

// Largest cluster Hopper schedules (non-portable; 8 is portable).
constexpr int kIndexMaxClusterSize = 16;

// What the device can run as clusters of the score kernel: the largest cluster size it
// schedules (16, 8, or 0 without cluster support) and, for each size up to that, how many such
// clusters fit at once (cudaOccupancyMaxActiveClusters; a cluster stays within one GPC, so 16-CTA
// clusters of a 2-CTA-per-SM kernel fit 14 at a time on an H200, not 132 x 2 / 16).
struct IndexClusterLimits {
  int max_size = 0;
  int64_t resident[kIndexMaxClusterSize + 1] = {};
};

// In-cluster selection counts ranks with one selecting thread per block column (the select
// kernel's rank path), so it serves block tables of at most this many columns (32K tokens at
// block 128).
constexpr int64_t kIndexClusterSelectMaxBlocks = 256;
// Blocks per CTA an in-cluster plan may grow to, when the one-wave plan has fewer and its grid
// fills at least half a wave: batch 8 at 8K (256 two-block CTAs) becomes eight 16-CTA clusters of
// 4-block CTAs. Longer CTAs, or smaller grids, lose more to each warp waiting for its tiles one
// after another than the select kernel costs (bench/EXPERIMENTS.md:
// 2026-11-30-index-cluster-select-ab).
constexpr int kIndexClusterGrowBlocks = 4;
// Longest score CTAs (blocks) for which the select kernel launches as the score CTAs start: with
// short CTAs its launch and row setup then hide behind the whole score kernel; with 16-block CTAs
// it was slower at some shapes, so longer CTAs let it launch only once they have scored
// (bench/EXPERIMENTS.md: 2026-11-30-index-query-tiles-pdl-ab). Only for tables the select kernel
// ranks in one pass (kIndexClusterSelectMaxBlocks columns): over wider tables (sampled-candidate
// selection) the early launch slowed the whole decode step, for no gain in the index call
// (bench/results/2026-11-30-a5056f8-decode.md).
constexpr int kIndexEarlySelectMaxBlocks = 4;

// One-block score CTAs are kept only while there are at most as many as SMs; past that, CTAs of
// two blocks (one per SM), which were faster there. Doubling further, to one CTA per SM for every
// grid, was slower wherever the one-wave plan already had longer CTAs, as the stream then has
// half the warps per SM (bench/EXPERIMENTS.md: 2026-11-30-index-two-block-ctas-ab).
constexpr int kIndexMinBlocksPerCtaPastSms = 2;

// A static score grid whose CTAs own at least this many blocks runs the scorer's 32-key-tile
// instance where it has one (e4m3-key decode scorers at head dim 64 and 128): each warp then has
// several tiles to stream, and the tile's fixed costs serve twice the keys; grids of 2-4-block
// CTAs, whose warps own one or two tiles, were slower with it (bench/EXPERIMENTS.md:
// 2026-11-30-index-m2-tiles-ab, call 3).
constexpr int kIndexWideTileMinBlocksPerCta = 16;

// Whether a plan's score grid is static with CTAs long enough for 32-key tiles, and fits one wave
// of the 32-key instance (wide_wave: its resident CTAs per SM x SMs). The plan sizes its grid by
// the 16-key instance's occupancy, which can be higher (head dim 64: three CTAs per SM against
// two), and a second, partial wave would cost more than the wider tiles save.
inline bool index_static_wide_tiles(const IndexLaunchPlan& p, int64_t wide_wave) {
  return p.chunks > 0 && p.balanced_ctas == 0 && !p.cluster_select &&
         p.blocks_per_cta >= kIndexWideTileMinBlocksPerCta && p.row_tiles * p.chunks <= wide_wave;
}

// row_tiles x max_blocks block positions, cut into CTAs of blocks_per_cta consecutive blocks.
// blocks_per_cta is the smallest power of two (<= kIndexMaxBlocksPerCta) whose grid fits in one
// wave of resident CTAs (ctas_per_sm, the score kernel's occupancy, x sm_count), and at least
// kIndexMinBlocksPerCtaPastSms when one-block CTAs would outnumber the SMs: a small batch
// (batch 1 at 8K: 64 blocks) spreads its stream over as many CTAs as can run at once, and no
// call pays for a second, partial wave of short CTAs. Large batches (more blocks than a
// wave can hold at 32 per CTA) stream in waves of 32-block CTAs, which pay the per-CTA prologue
// (query load, page ids, barrier) once per 32 blocks. When the scorer has a balanced-grid
// variant (balanced_ctas_per_sm > 0: the decode scorers of e4m3 keys, and of bf16 keys with one
// query n-tile), such decode grids become one wave of balanced_ctas CTAs that share the visible
// blocks of all requests at run time (balanced_share): a static CTA's work is fixed by the plan,
// so in a ragged batch the CTAs of short requests would leave their SMs idle while the long
// requests stream (bench/EXPERIMENTS.md: 2026-11-30-index-balanced-grid-ab).
//
// The top-k selection is then a second kernel, one CTA per (row, head), except in decode calls
// (a row tile is one request) with block tables of at most kIndexClusterSelectMaxBlocks columns
// whose chunks can form one thread-block cluster per request, all clusters resident at once,
// with CTAs grown at most as kIndexClusterGrowBlocks allows: the cluster selects from the block
// maxima in its CTAs' shared memory after a cluster barrier (cluster_select), so the call is one
// kernel. Fusing the selection into the last score CTA of a row (completion counter), or into a
// cooperatively launched score grid after a grid barrier, was slower (bench/EXPERIMENTS.md:
// 2026-11-29-214f6af-rejected-variants.md, 2026-11-29-rejected-prefetch-cooperative).
inline IndexLaunchPlan plan_index_launch(int64_t row_tiles, int64_t max_blocks, int sm_count,
                                         int ctas_per_sm, bool decode = false,
                                         const IndexClusterLimits& clusters = {},
                                         int balanced_ctas_per_sm = 0) {
  IndexLaunchPlan p;
  p.row_tiles = row_tiles;
  if (row_tiles <= 0 || max_blocks <= 0) return p;
  const int64_t sms = std::max(sm_count, 1);
  const int64_t wave = std::max(ctas_per_sm, 1) * sms;
  auto chunks_of = [&](int bpc) { return (max_blocks + bpc - 1) / bpc; };
  int bpc = 1;
  while (bpc < kIndexMaxBlocksPerCta && row_tiles * chunks_of(bpc) > wave) bpc *= 2;
  if (bpc == 1 && row_tiles * max_blocks > sms) bpc = kIndexMinBlocksPerCtaPastSms;
  p.blocks_per_cta = bpc;
  p.chunks = chunks_of(bpc);
  p.early_select = bpc <= kIndexEarlySelectMaxBlocks && row_tiles * p.chunks <= wave &&
                   max_blocks <= kIndexClusterSelectMaxBlocks;
  if (balanced_ctas_per_sm > 0 && decode && row_tiles <= kIndexBalancedMaxRequests &&
      row_tiles * (max_blocks + kIndexBalancedMaxLeadUnits) <= INT32_MAX &&
      row_tiles * p.chunks > wave) {
    p.balanced_ctas = int64_t{balanced_ctas_per_sm} * sms;
    p.early_select = false;
    return p;
  }
  const int max_size = std::min(clusters.max_size, kIndexMaxClusterSize);
  if (!decode || max_size < 1 || max_blocks > kIndexClusterSelectMaxBlocks) return p;
  const int grow_to = 2 * row_tiles * p.chunks >= wave ? kIndexClusterGrowBlocks : bpc;
  for (int cbpc = bpc; cbpc <= std::max(bpc, grow_to); cbpc *= 2) {
    const int64_t c = chunks_of(cbpc);
    if (c <= max_size && row_tiles <= clusters.resident[c]) {
      p.blocks_per_cta = cbpc;
      p.chunks = c;
      p.cluster_select = true;
      p.early_select = false;
      return p;
    }
  }
  return p;
}

// Blocks [begin, end) of a row tile owned by the CTA of chunk `chunk` (the kernels compute the
// same from blockIdx.y); end is clipped to max_blocks.
inline BlockRange index_cta_blocks(const IndexLaunchPlan& p, int64_t chunk, int64_t max_blocks) {
  const int64_t begin = chunk * p.blocks_per_cta;
  return BlockRange{std::min(begin, max_blocks), std::min(begin + p.blocks_per_cta, max_blocks)};
}

// ---- Sparse attention (split-K over the selected blocks) ----

// About two resident 128-thread attention CTAs per SM (about 230 registers per thread).
constexpr int64_t kAttnCtasPerSm = 2;
constexpr int64_t kAttnWarpsPerCta = 4;
// Splits of one row merged by the merge kernel (it loads the first 32 splits' partials and
// log2-sum-exps in one batch into registers, and reads any further ones in a loop).
constexpr int64_t kAttnMaxSplits = 64;
// Splits of one row run as one thread-block cluster: Hopper's largest (non-portable) size.
constexpr int64_t kAttnMaxClusterSplits = 16;

struct AttnLaunchPlan {
  int64_t rows = 0;
  int64_t splits = 1;              // grid.z; > 1: the partials are merged, in-cluster or by kernel
  int64_t subtiles_per_split = 0;  // 16-key subtiles of the row's selected-block list per split
  bool cluster = false;            // the splits of a row are one cluster (cluster z = splits >= 2)
  bool block_ctas = false;         // one list entry per split, run by the one-block kernel
};

// What the device can run as clusters of the attention kernel: the largest cluster size it
// schedules (16, 8, or 0 without cluster support) and how many such clusters fit at once
// (cudaOccupancyMaxActiveClusters: 14 of 16 CTAs on an H200, fewer than 132 SMs x 2 / 16
// because a cluster must sit within one GPC).
struct AttnClusterLimits {
  int64_t max_splits = 0;
  int64_t resident = 0;
};

// Longest split of an in-cluster plan: two subtiles per warp. With more, each warp waits for its
// subtiles one after another (its next subtile's loads are its only ones in flight), and 8-CTA
// clusters of 16 subtiles each were slower at batch 1 than 32 short splits plus the merge kernel
// (bench/EXPERIMENTS.md: 2026-11-29-cluster-merge-ab).
constexpr int64_t kAttnClusterMaxSubtiles = 2 * kAttnWarpsPerCta;

// A row has at most max_subtiles 16-key subtiles (topk_width * block_size / 16). When rows x KV
// heads x head chunks gives fewer than kAttnCtasPerSm CTAs per SM (small decode batches), that
// range is cut into equal splits (a multiple of 4 subtiles each, one per warp) so the total stays
// within one resident wave (a second, partial wave would double the latency chain of the call).
// The splits of a row are one cluster, merged through distributed shared memory, when the
// device's largest cluster cuts the row into splits of at most kAttnClusterMaxSubtiles and one
// cluster per (row, head group) fits in one wave of clusters (14 on an H200: TP4 decode batch
// 1-14, or 1-3 with 4 speculative rows): one kernel instead of two. Otherwise the pieces (at most
// kAttnMaxSplits) are combined by a merge kernel: at batch 16-64 the cluster cuts were slower,
// because 16-CTA clusters only fit 14 at a time and smaller ones mean longer splits
// (bench/EXPERIMENTS.md: 2026-11-29-cluster-merge-ab).
//
// block_entries: the top-k width W when the call can run the one-block kernel (16-bit or e4m3
// K/V, head dim 128, 128-key blocks), else 0. Where a split per list entry still fits one resident
// wave (W x rows x head groups <= kAttnCtasPerSm per SM; TP4 decode batch 1-16 at top-16), each
// list entry is a split of its own for that kernel, ahead of both plans above (faster at batch
// 1-16: bench/EXPERIMENTS.md: 2026-12-01-attn-block-ctas).
inline AttnLaunchPlan plan_attention_launch(int64_t rows, int64_t head_groups, int64_t max_subtiles,
                                            int sm_count, AttnClusterLimits clusters = {},
                                            int64_t block_entries = 0) {
  AttnLaunchPlan p;
  p.rows = rows;
  p.subtiles_per_split = max_subtiles;
  const int64_t wanted = kAttnCtasPerSm * std::max(sm_count, 1);
  const int64_t ctas = rows * head_groups;
  if (ctas > 0 && block_entries > 1 && block_entries <= kAttnMaxSplits &&
      max_subtiles % block_entries == 0 && ctas * block_entries <= wanted) {
    p.splits = block_entries;
    p.subtiles_per_split = max_subtiles / block_entries;
    p.block_ctas = true;
    return p;
  }
  if (ctas == 0 || ctas >= wanted || max_subtiles <= kAttnWarpsPerCta) return p;
  // Equal pieces of a whole number of warps' subtiles.
  auto per_split = [&](int64_t pieces) {
    const int64_t per = (max_subtiles + pieces - 1) / pieces;
    return (per + kAttnWarpsPerCta - 1) / kAttnWarpsPerCta * kAttnWarpsPerCta;
  };
  const int64_t cluster = std::min(clusters.max_splits, kAttnMaxClusterSplits);
  if (cluster > 1 && ctas <= clusters.resident && ctas * cluster <= wanted &&
      per_split(cluster) <= kAttnClusterMaxSubtiles) {
    p.subtiles_per_split = per_split(cluster);
    p.splits = (max_subtiles + p.subtiles_per_split - 1) / p.subtiles_per_split;
    p.cluster = true;
    return p;
  }
  const int64_t want = std::min(wanted / ctas, kAttnMaxSplits);
  if (want <= 1) return p;
  p.subtiles_per_split = per_split(want);
  p.splits = (max_subtiles + p.subtiles_per_split - 1) / p.subtiles_per_split;
  return p;
}

// Batch-invariant calls: every row's subtile list is cut into pieces of kAttnInvariantSplit
// subtiles (4 blocks of 128 keys; more where the list would need over kAttnMaxSplits pieces),
// merged by the merge kernel, whatever the batch: a row's pieces depend on the top-k width only.
constexpr int64_t kAttnInvariantSplit = 32;
inline AttnLaunchPlan plan_attention_invariant(int64_t rows, int64_t max_subtiles) {
  AttnLaunchPlan p;
  p.rows = rows;
  int64_t per = kAttnInvariantSplit;
  if (max_subtiles > per * kAttnMaxSplits) {
    per = (max_subtiles + kAttnMaxSplits - 1) / kAttnMaxSplits;
    per = (per + kAttnWarpsPerCta - 1) / kAttnWarpsPerCta * kAttnWarpsPerCta;
  }
  p.subtiles_per_split = per;
  p.splits = std::max<int64_t>((max_subtiles + per - 1) / per, 1);
  if (p.splits == 1) p.subtiles_per_split = max_subtiles;
  return p;
}

// Subtiles [begin, end) of a row's list handled by split `split` (clipped to max_subtiles).
inline BlockRange attention_split_subtiles(const AttnLaunchPlan& p, int64_t split,
                                           int64_t max_subtiles) {
  const int64_t begin = split * p.subtiles_per_split;
  return BlockRange{std::min(begin, max_subtiles),
                    std::min(begin + p.subtiles_per_split, max_subtiles)};
}

// ---- Prefill: tensor-core kernels or CUDA-core kernels ----

// What the environment variable MSA_CUDA_PREFILL asks for (docs/api.md, kernel choice): "tc"
// takes the tensor-core prefill kernels wherever they apply, "simt" never does (the CUDA-core
// kernels, for comparison and as a workaround); unset (null) or any other value gives kDefault.
enum class PrefillChoice { kDefault, kTensorCores, kSimt };

inline PrefillChoice parse_prefill_choice(const char* value) {
  if (value != nullptr && std::strcmp(value, "tc") == 0) return PrefillChoice::kTensorCores;
  if (value != nullptr && std::strcmp(value, "simt") == 0) return PrefillChoice::kSimt;
  return PrefillChoice::kDefault;
}

// ---- Prefill attention over e4m3 caches: K/V converted once per call into a bf16 copy ----

// A tensor-core prefill attention call over an e4m3 cache that is not batch invariant converts
// every page its requests hold once into a bf16 copy in the workspace, and the bf16 kernel (bulk
// tensor copies, for dense the pipelined consumer) reads that, instead of converting every visited
// page again for every tile (H100, bench/results/2026-12-06-629e0b2-h100-per-call-copies.md:
// dense e4m3 -29..-35% at 4K-64K). The copy is reserved for min(num_requests x max_blocks,
// rows / kKvCopyRowsPerPage) pages, at most 16 KB per row and KV head (K and V), which grows with
// every capacity; a call uses it when its block table holds at most one page per
// kKvCopyRowsPerPage rows (single prompts, an 8K chunk after a 120K prefix; not a short chunk
// after a long prefix). Sparse calls also need max_blocks <= kSparseKvCopyMaxBlocks: on random
// top-k they are bound by L2 bandwidth, and bf16 tiles are twice the bytes that the CUDA-core
// kernels read as e4m3, which then win (by the bf16 tensor-core kernel's speed, 3-13% at 64K-128K
// prompts and 17% after a 120K prefix, against 1.3-2.4x slower at 4K-16K and the 2K-32K batch).
// Batch-invariant calls never copy: whether a call copies depends on the batch, and the dense copy
// kernel's pipelined loop rounds differently.
constexpr int64_t kKvCopyRowsPerPage = 8;
constexpr int64_t kSparseKvCopyMaxBlocks = 256;

inline int64_t prefill_kv_copy_pages(bool batch_invariant, DType cache_dtype, int64_t requests,
                                     int64_t max_blocks, int64_t rows) {
  if (batch_invariant || cache_dtype != DType::kE4M3) return 0;
  return std::min(requests * max_blocks, rows / kKvCopyRowsPerPage);
}

inline bool prefill_kv_copied(bool sparse, bool batch_invariant, DType cache_dtype,
                              int64_t requests, int64_t max_blocks, int64_t rows) {
  if (batch_invariant || cache_dtype != DType::kE4M3) return false;
  if (sparse && max_blocks > kSparseKvCopyMaxBlocks) return false;
  const int64_t pages = requests * max_blocks;
  return pages > 0 && pages * kKvCopyRowsPerPage <= rows;
}

// The prefill index's twin (src/cuda/prefill/index_scores.cuh, kE4M3Copy): a call with e4m3
// queries and keys of head dim and block size 128 converts each key page of its requests once
// into an f16 copy when num_requests * kIndexKeyCopyRowHeads <= heads * rows: the copy (32 KB per
// request and block) then takes no more workspace than the block maxima (4 bytes per row, head
// and block), so long prompts take it and batches of short requests convert per tile. Its
// reservation, min(num_requests, heads * rows / kIndexKeyCopyRowHeads) requests' pages, grows
// with every capacity.
constexpr int64_t kIndexKeyCopyRowHeads = 8192;

inline int64_t prefill_index_key_copy_requests(int64_t requests, int64_t heads, int64_t rows) {
  return std::min(requests, heads * rows / kIndexKeyCopyRowHeads);
}

inline bool prefill_index_keys_copied(int64_t requests, int64_t heads, int64_t rows) {
  return requests > 0 && requests * kIndexKeyCopyRowHeads <= heads * rows;
}

// Whether a prefill attention call that the tensor-core kernel supports takes it under `choice`.
// By default it does, except sparse attention over e4m3 caches without the per-call copy
// (kv_copied false): there the tensor-core kernel's e4m3 producer (loads, conversion to bf16,
// stores by one warpgroup) ran at 0.5-0.75x the CUDA-core kernels' speed at 16K-128K prompts on an
// H100 (bench/results/2026-12-06-c2a2f9a-h100-final.md). Dense attention over e4m3 takes it with
// either scale mode: the CUDA-core dense kernels ran at 12 useful TF/s there against 342-383 for
// the tensor-core kernel's per-tile conversion with per-layer scales.
inline bool prefill_attention_takes_tensor_cores(PrefillChoice choice, bool sparse,
                                                 DType cache_dtype, bool kv_copied) {
  if (choice == PrefillChoice::kSimt) return false;
  if (choice == PrefillChoice::kTensorCores) return true;
  return !(cache_dtype == DType::kE4M3 && sparse) || kv_copied;
}

// The same for the prefill index scorer: by default wherever it applies.
inline bool prefill_index_takes_tensor_cores(PrefillChoice choice) {
  return choice != PrefillChoice::kSimt;
}

// ---- Decode step: one persistent kernel or the index and attention ops ----

// What the environment variable MSA_CUDA_DECODE_STEP asks for (docs/api.md, kernel choice):
// "persistent" takes the persistent step kernel wherever it applies and fails the call with
// kNotSupported where it does not; "chain" always runs the index and attention ops; unset (null)
// or any other value gives kDefault.
enum class DecodeStepChoice { kDefault, kPersistent, kChain };

inline DecodeStepChoice parse_decode_step_choice(const char* value) {
  if (value != nullptr && std::strcmp(value, "persistent") == 0) {
    return DecodeStepChoice::kPersistent;
  }
  if (value != nullptr && std::strcmp(value, "chain") == 0) return DecodeStepChoice::kChain;
  return DecodeStepChoice::kDefault;
}

enum class DecodeStepPath { kPersistent, kChain, kNotSupported };

// How a decode step call runs. `applies`: the persistent kernel serves the call's dtypes, shapes
// and strides and the device can hold its grid (the CUDA launcher decides). By default the two
// ops: the persistent kernel measured 1.2-2.1x slower than them on an H100 at TP4 batch 1-16
// (bench/results/2026-12-06-c2a2f9a-h100-final.md), so it runs only when asked for, and only where
// it gives the ops' bits: calls whose attention op would take one CTA per selected block
// (plan_attention_launch's block_ctas rule: rows x head groups x topk_width <= kAttnCtasPerSm per
// SM, topk_width 2..64) and that are not batch invariant (their attention op cuts rows into fixed
// 32-subtile splits, whose bits the kernel's per-block splits would not reproduce). A forced call
// outside that is kNotSupported.
inline DecodeStepPath decode_step_path(DecodeStepChoice choice, bool applies, bool batch_invariant,
                                       int64_t rows, int64_t head_groups, int64_t topk_width,
                                       int sm_count) {
  if (choice != DecodeStepChoice::kPersistent) return DecodeStepPath::kChain;
  const int64_t wanted = kAttnCtasPerSm * std::max(sm_count, 1);
  const bool block_ctas = rows > 0 && head_groups > 0 && topk_width > 1 &&
                          topk_width <= kAttnMaxSplits && rows * head_groups * topk_width <= wanted;
  return applies && !batch_invariant && block_ctas ? DecodeStepPath::kPersistent
                                                   : DecodeStepPath::kNotSupported;
}

// ---- Dense attention's split-KV kernels (decode rows, short chunks) ----

// Splits per (row, KV head) of a call with `rows` query rows and `max_tiles` key tiles of block
// table capacity (src/cuda/dense_attention.cu): enough CTAs to reach kDenseTargetCtas, five per SM
// of an H100/H200, as many as the head-dim-128 kernel's 42 KB of shared memory lets an SM hold (a
// CTA's tile loop is bound by its own latency, so the SM needs the warps); each split at least
// kDenseMinTilesPerSplit tiles (below that a split costs more than it saves); at most
// kDenseMaxSplits, so that one row at a long context spreads over most SMs (H100,
// bench/results/2026-12-06-9985e6b-h100-engine-dense-decode.md: 64 rows at 4-16K 729 -> 423 us,
// one row at 128K 2337 -> 343 us against 256 CTAs and 16 splits). Batch-invariant calls keep a
// row's keys in one piece. Shapes only, so a captured graph replays any batch of the same shapes.
constexpr int64_t kDenseTargetCtas = 640;
constexpr int64_t kDenseMaxSplits = 512;
constexpr int64_t kDenseMinTilesPerSplit = 8;

inline int dense_split_count(bool batch_invariant, int64_t rows, int64_t kv_heads,
                             int64_t max_tiles) {
  if (batch_invariant) return 1;
  const int64_t ctas = rows * kv_heads;
  if (ctas <= 0 || ctas >= kDenseTargetCtas) return 1;
  const int64_t by_fill = (kDenseTargetCtas + ctas - 1) / ctas;
  const int64_t by_keys = std::max<int64_t>(max_tiles / kDenseMinTilesPerSplit, 1);
  return static_cast<int>(std::min<int64_t>({by_fill, by_keys, kDenseMaxSplits}));
}

}  // namespace detail
}  // namespace msa
