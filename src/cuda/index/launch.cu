// CUDA backend of the indexer top-k ops (spec A2-A4, A8, A12); prefill calls whose shapes suit
// it score on the tensor-core kernel of src/cuda/prefill instead.
//
// Two kernels, or one, with grids from shapes only (captured graphs replay as the batch contents
// change):
//  1. A score kernel writes each visible block's maximum score per (row, index head) to a
//     workspace [H, T, max_blocks] fp32. Decode is memory-bound on the index keys, so each key is
//     read once per call: a CTA owns a tile of rows (decode: one request's query_len rows;
//     prefill: up to 32 / H rows, split at request boundaries) and a chunk of blocks, streams the
//     keys and dots each with every (row, head) query of the tile, keeping the next tile's loads
//     in flight while it multiplies the current one. blocks_per_cta (plan_index_launch in
//     core/launch_policy.h) is the smallest that fits the grid in one wave of resident CTAs.
//     Head dims that are a multiple of 64 use the tensor-core scorers (score_mma.cuh: queries and
//     keys converted exactly to bf16, or f16 when both are e4m3, so the products are the exact
//     fp32 ones), whose lanes load 16 bytes of keys at a time (e4m3 rows that are not 16-byte
//     aligned, like other head dims, use the SIMT scorer, score_simt.cuh).
//  2. index_select_kernel (select.cuh), grid (T, H): the exact top min(topk, nvb) blocks in the
//     spec's order (tier, score, lower id), written ascending and -1 padded. Tables of at most
//     256 columns run index_select_narrow_kernel (the rank count, or a warp tournament for rows of
//     more than 64 blocks); wider tables rank a candidate set cut by a lower bound on the k-th key
//     (the warps' largest keys, else samples) and fall back to an 8-bit radix descent. It is a
//     programmatic dependent launch that resolves its rows while the score kernel finishes and
//     then waits for the scores. Prefill calls with tables of at most kWarpSelectMaxBlocks
//     columns run index_select_warp_kernel instead: one warp per (row, head), same keys and
//     order, so the same bits.
// Decode grids that would take more than one wave over e4m3 keys, or bf16 keys with one query
// n-tile at head dim 64 or 128 (has_balanced_grid), run index_score_mma_balanced_kernel on one
// wave of CTAs instead: every CTA takes an equal share of all requests' visible blocks
// (detail::balanced_share), so the CTAs of short requests in a ragged batch do not idle while the
// long ones stream. Over e4m3 keys with one query n-tile (wide_key_tiles) a warp scores 32 keys
// per tile instead of 16, which halves the tile's fixed costs per key. Decode calls with tables
// of at most 256 columns whose score CTAs of a request fit one resident thread-block cluster run
// index_score_mma_cluster_kernel alone: each cluster selects its request's top-k from the block
// maxima in distributed shared memory (cluster_select.cuh), with the select kernel's keys and
// selection, so the bits are the same.
// Both kernels resolve rows through the same RowMap, so padding rows and rows of requests with
// bad metadata are -1 everywhere. The scorers accumulate in fp32 in a fixed order, so results are
// bitwise repeatable. bench/EXPERIMENTS.md holds the measurements behind each choice (search for
// "index").
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/backends.h"
#include "core/index_topk_problem.h"
#include "core/launch_policy.h"
#include "core/validate.h"
#include "cuda/common.cuh"
#include "cuda/index/params.cuh"
#include "cuda/index/score_mma.cuh"
#include "cuda/index/score_simt.cuh"
#include "cuda/index/select.cuh"
#include "cuda/prefill/prefill.h"
#include "msa/indexer.h"

namespace msa {
namespace cuda {
namespace {

// Both forms, with the row layout resolved (query_len > 0: decode; else prefill).
using IndexProblem = detail::IndexTopkProblem;

static_assert(detail::kIndexMaxBlocksPerCta == kMaxScoreBlocks,
              "the launch policy and the score kernels agree on blocks per CTA");

// Block maxima [H, T, max_blocks] fp32, then (prefill) the tensor-core scorer's tile plan and
// key copy.
size_t scores_bytes(const IndexProblem& pb) {
  return detail::align_up(static_cast<size_t>(pb.num_heads() * pb.num_rows() * pb.max_blocks()) *
                          sizeof(float));
}
size_t workspace_bytes(const IndexProblem& pb) {
  return scores_bytes(pb) + (pb.query_len == 0 ? prefill::index_scores_workspace_bytes(pb) : 0);
}

int rows_per_tile(const IndexProblem& pb) {
  if (pb.query_len > 0) return pb.query_len;
  return static_cast<int>(kMaxScoreRowHeads / pb.num_heads());
}

Status check_supported(const IndexProblem& pb) {
  const int64_t di = pb.head_dim();
  const int64_t bs = pb.index_cache.shape[1];
  if (di % 8 != 0 || di > kMaxIndexDim) {
    return detail::not_supported("index_q: head dim " + std::to_string(di) +
                                 " unsupported by the CUDA indexer (multiple of 8, at most 256)");
  }
  if (bs % 16 != 0) {
    return detail::not_supported("index_cache: block size " + std::to_string(bs) +
                                 " unsupported by the CUDA indexer (multiple of 16)");
  }
  const int64_t esize = dtype_size(pb.index_cache.dtype);
  const uintptr_t align = static_cast<uintptr_t>(8 * esize);
  if (reinterpret_cast<uintptr_t>(pb.index_cache.data) % align != 0 ||
      pb.index_cache.strides[0] % 8 != 0 || pb.index_cache.strides[1] % 8 != 0) {
    return detail::not_supported(
        "index_cache: the CUDA indexer loads 8 elements at a time and needs the data pointer "
        "aligned to " +
        std::to_string(align) + " bytes and page/key strides multiple of 8");
  }
  if (bs * pb.index_cache.strides[1] + di > 0x7FFFFFFF) {
    return detail::not_supported(
        "index_cache: block_size x key stride must stay below 2^31 elements for the CUDA indexer "
        "(32-bit offsets within a page)");
  }
  if (pb.query_len > 0 && pb.query_len * pb.num_heads() > kMaxScoreRowHeads) {
    return detail::not_supported(
        "index_q: query_len * H_idx = " + std::to_string(pb.query_len * pb.num_heads()) +
        " above the CUDA indexer's 32 query vectors per request");
  }
  if (pb.query_len == 0 && pb.num_heads() > kMaxScoreRowHeads) {
    return detail::not_supported("index_q: " + std::to_string(pb.num_heads()) +
                                 " index heads, the CUDA indexer supports at most 32");
  }
  if (pb.max_blocks() >= (int64_t{1} << 30)) {
    return detail::not_supported("block_table: more than 2^30 block columns");
  }
  return Status::Ok();
}

// One CTA per (row, head); tables of more than kSelectThreads columns.
template <int kKeys>
__global__ void __launch_bounds__(kSelectThreads) index_select_kernel(const IndexSelectParams prm) {
  __shared__ SelectSmem sm;
  select_row_topk<kKeys>(prm, blockIdx.x, blockIdx.y, sm);
}

// One CTA per (row, head); tables of at most kSelectThreads columns. A kernel of its own, so that
// its code is the rank path's alone: one select CTA runs with cold instruction caches at the end
// of the index call, and its warps mostly waited for instructions while the path was one branch
// of the wide-table kernel (bench/EXPERIMENTS.md: 2026-12-01-select-narrow-kernel).
__global__ void __launch_bounds__(kSelectThreads)
    index_select_narrow_kernel(const IndexSelectParams prm) {
  __shared__ SelectSmem sm;
  select_row_topk_by_rank(prm, blockIdx.x, blockIdx.y, sm);
}

// One warp per (row, head) of a prefill call whose table has at most 32 * P columns
// (kWarpSelectMaxBlocks): row blockIdx.x * kSelectWarps + warp of head blockIdx.y, so a CTA's
// warps read adjacent rows.
template <int P>
__global__ void __launch_bounds__(kSelectThreads)
    index_select_warp_kernel(const IndexSelectParams prm) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kSelectWarps + (threadIdx.x >> 5);
  __shared__ uint64_t cand[kSelectWarps][kWarpCandidates];
  if (row >= prm.rows.num_rows) return;
  select_row_topk_warp<P>(prm, row, blockIdx.y, cand[threadIdx.x >> 5]);
}

// The warp select's instance for a table of max_blocks <= kWarpSelectMaxBlocks columns: the
// fewest keys per lane, in powers of two, that hold the table.
using SelectKernel = void (*)(IndexSelectParams);
SelectKernel warp_select_kernel(int64_t max_blocks) {
  const int64_t per_lane = (max_blocks + 31) / 32;
  return per_lane <= 1    ? index_select_warp_kernel<1>
         : per_lane <= 2  ? index_select_warp_kernel<2>
         : per_lane <= 4  ? index_select_warp_kernel<4>
         : per_lane <= 8  ? index_select_warp_kernel<8>
         : per_lane <= 16 ? index_select_warp_kernel<16>
                          : index_select_warp_kernel<32>;
}

using ScoreKernel = void (*)(IndexScoreParams);

template <typename CacheT>
ScoreKernel simt_score_kernel(int upl) {
  switch (upl) {
    case 1:
      return index_score_kernel<CacheT, 1>;
    case 2:
      return index_score_kernel<CacheT, 2>;
    case 3:
      return index_score_kernel<CacheT, 3>;
    default:
      return index_score_kernel<CacheT, 4>;
  }
}

using ClusterScoreKernel = void (*)(IndexScoreParams, IndexSelectParams);

// A balanced-grid scorer instance and the dynamic shared memory it is launched with.
struct BalancedScorer {
  ScoreKernel kernel;
  size_t smem;
};
template <typename CacheT, int CH, bool kF16, int kNTiles, int kM>
BalancedScorer balanced_instance() {
  return {index_score_mma_balanced_kernel<CacheT, CH, kF16, kNTiles, kM>,
          balanced_dynamic_smem<CacheT, CH, kM>()};
}

// One tensor-core scorer instance of the grid mapping kGrid.
template <typename CacheT, int CH, bool kF16, ScoreGrid kGrid, int kNTiles>
auto mma_instance() {
  if constexpr (kGrid == ScoreGrid::kClusterSelect) {
    return index_score_mma_cluster_kernel<CacheT, CH, kF16, kNTiles>;
  } else if constexpr (kGrid == ScoreGrid::kBalanced) {
    return balanced_instance<CacheT, CH, kF16, kNTiles, 1>();
  } else {
    return index_score_mma_kernel<CacheT, CH, kF16, kNTiles>;
  }
}

// Decode calls with at most 8 query vectors per request (query_len x H_idx) use the scorer
// instance that holds one n-tile of queries, which is faster (bench/EXPERIMENTS.md:
// 2026-11-30-index-query-tiles-pdl-ab, for bf16 keys 2026-11-30-index-bf16-one-tile-ab); prefill
// tiles and larger decode rows keep the 4-tile one (up to kMaxScoreRowHeads vectors).
bool one_query_tile(const IndexProblem& pb) {
  return pb.query_len > 0 && pb.query_len * pb.num_heads() <= 8;
}

// The tensor-core scorer for head dim 64 x chunks (1..4; the balanced grid 1..3, the head dims
// query_launch_info lets use it).
template <typename CacheT, bool kF16, ScoreGrid kGrid, int kNTiles>
auto mma_for_chunks(int64_t chunks) {
  constexpr int kTopChunks = kGrid == ScoreGrid::kBalanced ? 3 : 4;
  switch (chunks) {
    case 1:
      return mma_instance<CacheT, 1, kF16, kGrid, kNTiles>();
    case 2:
      return mma_instance<CacheT, 2, kF16, kGrid, kNTiles>();
    case 3:
      return mma_instance<CacheT, 3, kF16, kGrid, kNTiles>();
    default:
      return mma_instance<CacheT, kTopChunks, kF16, kGrid, kNTiles>();
  }
}

template <typename CacheT, bool kF16, ScoreGrid kGrid>
auto mma_for_problem(const IndexProblem& pb) {
  const int64_t chunks = pb.head_dim() / 64;
  if (one_query_tile(pb)) return mma_for_chunks<CacheT, kF16, kGrid, 1>(chunks);
  return mma_for_chunks<CacheT, kF16, kGrid, kMaxScoreRowHeads / 8>(chunks);
}

// The tensor-core scorer of a problem (head dim a multiple of 64). Both operands e4m3 are
// multiplied as f16, which converts from e4m3 in one instruction per pair.
template <ScoreGrid kGrid>
auto mma_kernel(const IndexProblem& pb) {
  if (pb.index_cache.dtype == DType::kBF16) {
    return mma_for_problem<__nv_bfloat16, false, kGrid>(pb);
  }
  return pb.index_q.dtype == DType::kE4M3 ? mma_for_problem<uint8_t, true, kGrid>(pb)
                                          : mma_for_problem<uint8_t, false, kGrid>(pb);
}

ClusterScoreKernel cluster_score_kernel(const IndexProblem& pb) {
  return mma_kernel<ScoreGrid::kClusterSelect>(pb);
}

// Whether a decode problem over e4m3 keys has a 32-key-tile scorer: one query n-tile at head dim
// 64 or 128, either query type, blocks a multiple of 32 keys. Its balanced grid always uses it; its
// static grid where the CTAs are long (index_static_wide_tiles) and static_wide_key_tiles allows.
// The balanced calls are faster with it, for either query type and head dim
// (bench/EXPERIMENTS.md: 2026-11-30-index-m2-tiles-ab, 2026-11-30-index-m2-more-ab).
bool wide_key_tiles(const IndexProblem& pb) {
  return pb.index_cache.dtype == DType::kE4M3 && one_query_tile(pb) &&
         (pb.head_dim() == 64 || pb.head_dim() == 128) && pb.index_cache.shape[1] % 32 == 0;
}

// Whether long static CTAs of a wide_key_tiles problem take the 32-key tiles too: not with bf16
// queries at head dim 128, whose 16-block CTAs gained at some shapes and lost at others
// (bench/EXPERIMENTS.md: 2026-11-30-index-m2-more-ab); at head dim 64 they gain
// (2026-11-30-index-static-wide-d64-ab).
bool static_wide_key_tiles(const IndexProblem& pb) {
  return wide_key_tiles(pb) && (pb.head_dim() == 64 || pb.index_q.dtype == DType::kE4M3);
}

// The static-grid scorer of a static_wide_key_tiles problem.
ScoreKernel wide_tile_static_kernel(const IndexProblem& pb) {
  if (pb.head_dim() == 128) return index_score_mma_kernel<uint8_t, 2, true, 1, 2>;
  return pb.index_q.dtype == DType::kE4M3 ? index_score_mma_kernel<uint8_t, 1, true, 1, 2>
                                          : index_score_mma_kernel<uint8_t, 1, false, 1, 2>;
}

// The balanced-grid scorer of a wide_key_tiles problem.
BalancedScorer wide_tile_balanced_scorer(const IndexProblem& pb) {
  const bool f16 = pb.index_q.dtype == DType::kE4M3;
  if (pb.head_dim() == 64) {
    return f16 ? balanced_instance<uint8_t, 1, true, 1, 2>()
               : balanced_instance<uint8_t, 1, false, 1, 2>();
  }
  return f16 ? balanced_instance<uint8_t, 2, true, 1, 2>()
             : balanced_instance<uint8_t, 2, false, 1, 2>();
}

// Whether a decode problem may run the balanced grid (query_launch_info): e4m3 keys up to head
// dim 192 (at 256 their instances spill), bf16 keys with one query n-tile at head dim 64 or 128.
// The bf16 four-tile instance spilled inside its tile loop at the 128-register bound and was much
// slower than the static grid (bench/EXPERIMENTS.md: 2026-11-30-index-balanced-grid-ab); the
// one-tile instance fits with the double buffer as two named buffers.
bool has_balanced_grid(const IndexProblem& pb) {
  if (pb.index_cache.dtype == DType::kE4M3) return pb.head_dim() <= 192;
  return one_query_tile(pb) && (pb.head_dim() == 64 || pb.head_dim() == 128);
}

// The balanced-grid scorer of a decode problem that has_balanced_grid.
BalancedScorer balanced_scorer(const IndexProblem& pb) {
  if (pb.index_cache.dtype == DType::kBF16) {
    return pb.head_dim() == 64 ? balanced_instance<__nv_bfloat16, 1, false, 1, 1>()
                               : balanced_instance<__nv_bfloat16, 2, false, 1, 1>();
  }
  if (wide_key_tiles(pb)) return wide_tile_balanced_scorer(pb);
  return pb.index_q.dtype == DType::kE4M3
             ? mma_for_problem<uint8_t, true, ScoreGrid::kBalanced>(pb)
             : mma_for_problem<uint8_t, false, ScoreGrid::kBalanced>(pb);
}

// The tensor-core scorers load 16 bytes per lane (MmaKeyLoad): head dims multiple of 64, and
// e4m3 key rows 16-byte aligned (bf16 rows are, by check_supported's 8-element rule).
bool uses_tensor_cores(const IndexProblem& pb) {
  if (pb.head_dim() % 64 != 0) return false;
  if (pb.index_cache.dtype == DType::kBF16) return true;
  return reinterpret_cast<uintptr_t>(pb.index_cache.data) % 16 == 0 &&
         pb.index_cache.strides[0] % 16 == 0 && pb.index_cache.strides[1] % 16 == 0;
}

// The score kernel of a problem: tensor cores where uses_tensor_cores, SIMT otherwise.
ScoreKernel score_kernel(const IndexProblem& pb) {
  if (uses_tensor_cores(pb)) return mma_kernel<ScoreGrid::kStatic>(pb);
  const int upl = static_cast<int>((pb.head_dim() / 8 + 7) / 8);
  return pb.index_cache.dtype == DType::kBF16 ? simt_score_kernel<__nv_bfloat16>(upl)
                                              : simt_score_kernel<uint8_t>(upl);
}

// CTAs of `kernel` (kScoreThreads threads, `smem` bytes of dynamic shared memory) resident on one
// SM.
int resident_ctas_per_sm(ScoreKernel kernel, size_t smem = 0) {
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kScoreThreads, smem) !=
          cudaSuccess ||
      n < 1) {
    (void)cudaGetLastError();  // the launch reports a real problem; plan for one CTA per SM
    n = 1;
  }
  return n;
}

// How many clusters of `kernel` of each size up to kIndexMaxClusterSize can be resident at once
// (all sizes: a call's cluster size is its chunk count), up to the first size the device cannot
// run (above the portable 8 only where the kernel accepts the non-portable attribute).
detail::IndexClusterLimits query_cluster_limits(ClusterScoreKernel kernel) {
  detail::IndexClusterLimits limits;
  for (int size = 1; size <= detail::kIndexMaxClusterSize; ++size) {
    const int resident =
        resident_clusters(kernel, dim3(kScoreThreads), dim3(1, static_cast<unsigned>(size), 1));
    if (resident < 1) break;
    limits.max_size = size;
    limits.resident[size] = resident;
  }
  return limits;
}

// What the launch policy needs of a problem's score kernel on the current device.
struct ScoreLaunchInfo {
  int ctas_per_sm = 1;                  // resident_ctas_per_sm
  detail::IndexClusterLimits clusters;  // of the cluster-selecting variant; none for SIMT
  int balanced_ctas_per_sm = 0;         // of the balanced-grid variant; 0 for SIMT
  int static_wide_ctas_per_sm = 0;      // of the static 32-key variant; 0 without one
};

ScoreLaunchInfo query_launch_info(const IndexProblem& pb) {
  ScoreLaunchInfo info;
  info.ctas_per_sm = resident_ctas_per_sm(score_kernel(pb));
  if (uses_tensor_cores(pb)) {
    info.clusters = query_cluster_limits(cluster_score_kernel(pb));
    if (has_balanced_grid(pb)) {
      // Above the default 48 KB a kernel's dynamic shared memory needs the opt-in attribute
      // (per device: launch_info caches this per device). Should it fail, the occupancy query
      // below fails too and the launch reports the error.
      const BalancedScorer scorer = balanced_scorer(pb);
      if (scorer.smem > 0) {
        (void)cudaFuncSetAttribute(scorer.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(scorer.smem));
      }
      info.balanced_ctas_per_sm = resident_ctas_per_sm(scorer.kernel, scorer.smem);
    }
    if (static_wide_key_tiles(pb)) {
      info.static_wide_ctas_per_sm = resident_ctas_per_sm(wide_tile_static_kernel(pb));
    }
  }
  return info;
}

// query_launch_info, cached per device and kernel variant: it depends only on the kernel's
// resources and the device (its SMs and GPCs), and the queries cost host time on every call.
ScoreLaunchInfo launch_info(const IndexProblem& pb) {
  // MMA: (bf16, e4m3, e4m3 x e4m3 queries) x head dim 64..256 x (1, 4 query n-tiles); SIMT:
  // (bf16, e4m3) x 1..4 units; and the 32-key instances (wide_key_tiles: head dim 64, 128 x query
  // type).
  static PerDeviceCache<ScoreLaunchInfo, 24 + 8 + 4> cache;
  const bool bf16 = pb.index_cache.dtype == DType::kBF16;
  int variant = 0;
  if (uses_tensor_cores(pb)) {
    const int dtype = bf16 ? 0 : pb.index_q.dtype == DType::kE4M3 ? 2 : 1;
    variant = (one_query_tile(pb) ? 12 : 0) + dtype * 4 + static_cast<int>(pb.head_dim() / 64) - 1;
    if (wide_key_tiles(pb)) variant = 32 + (pb.head_dim() == 128 ? 2 : 0) + (dtype == 2 ? 1 : 0);
  } else {
    variant = 24 + (bf16 ? 0 : 4) + static_cast<int>((pb.head_dim() / 8 + 7) / 8) - 1;
  }
  return cache.get(variant, [&] { return query_launch_info(pb); });
}

// The select kernel of a call, after the score kernel (after_scores) or with nothing scored.
Status launch_select(const IndexProblem& pb, const IndexSelectParams& sel, bool after_scores,
                     cudaStream_t cuda_stream) {
  dim3 grid(static_cast<unsigned>(pb.num_rows()), static_cast<unsigned>(pb.num_heads()));
  const bool narrow = pb.max_blocks() <= kSelectThreads;
  const int keys = select_keys_per_thread(pb.max_blocks());
  SelectKernel select_kernel = narrow      ? index_select_narrow_kernel
                               : keys == 4 ? index_select_kernel<4>
                               : keys == 8 ? index_select_kernel<8>
                                           : index_select_kernel<kSelectKeysPerThread>;
  const char* select_name = narrow ? "index_select_narrow_kernel" : "index_select_kernel";
  if (pb.query_len == 0 && pb.max_blocks() <= kWarpSelectMaxBlocks) {
    grid = dim3(static_cast<unsigned>((pb.num_rows() + kSelectWarps - 1) / kSelectWarps),
                static_cast<unsigned>(pb.num_heads()));
    select_kernel = warp_select_kernel(pb.max_blocks());
    select_name = "index_select_warp_kernel";
  }
  if (!after_scores) {
    // Nothing to score: the select kernel follows whatever the stream ran before, which may
    // have written this call's inputs, so it is launched in stream order.
    return launch_kernel(select_name, select_kernel, grid, dim3(kSelectThreads), 0, cuda_stream,
                         sel);
  }
  // A dependent launch: the select CTAs start while the score kernel finishes (early_select:
  // while it runs), resolve their rows (reading only this call's inputs, which the stream
  // finished writing before the score kernel started), and wait for its scores
  // (wait_for_prior_grid).
  return launch_kernel_dependent(select_name, select_kernel, grid, dim3(kSelectThreads), 0,
                                 cuda_stream, sel);
}

Status run_problem(const IndexProblem& pb, Workspace workspace, Stream stream) {
  MSA_RETURN_IF_ERROR(check_supported(pb));
  MSA_RETURN_IF_ERROR(detail::check_workspace(workspace, workspace_bytes(pb)));
  const int64_t T = pb.num_rows();
  if (T == 0) return Status::Ok();
  if (T > 0x7FFFFFFF || pb.num_heads() > 65535) {
    return detail::not_supported("index_topk: too many rows or heads for one CUDA grid");
  }
  const auto cuda_stream = static_cast<cudaStream_t>(stream.cuda_stream);

  const RowMap rows =
      make_row_map(pb.seq_lens, pb.cu_seqlens_q, pb.query_len, T, pb.max_blocks(), pb.block_size());
  auto* scores = static_cast<float*>(workspace.data);

  const IndexSelectParams sel = make_select_params(pb, rows, scores);

  if (pb.num_requests() > 0 && prefill::index_scores_supported(pb)) {
    MSA_RETURN_IF_ERROR(prefill::run_index_scores(
        pb, scores, static_cast<char*>(workspace.data) + scores_bytes(pb), stream));
    return launch_select(pb, sel, /*after_scores=*/true, cuda_stream);
  }

  const int rpt = rows_per_tile(pb);
  const int64_t row_tiles = pb.query_len > 0 ? rows.num_requests : (T + rpt - 1) / rpt;
  const ScoreKernel kernel = score_kernel(pb);
  const ScoreLaunchInfo info = launch_info(pb);
  const detail::IndexLaunchPlan plan =
      detail::plan_index_launch(row_tiles, pb.max_blocks(), device_sm_count(), info.ctas_per_sm,
                                pb.query_len > 0, info.clusters, info.balanced_ctas_per_sm);
  if (plan.chunks > 0) {
    if (row_tiles > 0x7FFFFFFF || plan.chunks > 65535) {
      return detail::not_supported("index_topk: batch too large for one CUDA grid (" +
                                   std::to_string(row_tiles) + " row tiles x " +
                                   std::to_string(plan.chunks) + " block chunks)");
    }
    IndexScoreParams prm = make_score_params(pb, rows, scores);
    prm.blocks_per_cta = plan.blocks_per_cta;
    prm.early_select = plan.early_select;
    const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(plan.chunks));
    const char* name = uses_tensor_cores(pb) ? "index_score_mma_kernel" : "index_score_kernel";
    if (plan.balanced_ctas > 0) {
      prm.balanced_lead = balanced_lead(pb);
      const BalancedScorer scorer = balanced_scorer(pb);
      MSA_RETURN_IF_ERROR(launch_kernel("index_score_mma_balanced_kernel", scorer.kernel,
                                        dim3(1, static_cast<unsigned>(plan.balanced_ctas)),
                                        dim3(kScoreThreads), scorer.smem, cuda_stream, prm));
    } else if (plan.cluster_select) {
      return launch_kernel_clustered("index_score_mma_cluster_kernel", cluster_score_kernel(pb),
                                     grid, dim3(kScoreThreads), 0, cuda_stream, dim3(1, grid.y, 1),
                                     prm, sel);
    } else {
      // Long static CTAs run the 32-key-tile instance where static_wide_key_tiles allows and the
      // grid fits one wave of it.
      const ScoreKernel static_kernel =
          info.static_wide_ctas_per_sm > 0 &&
                  detail::index_static_wide_tiles(
                      plan, int64_t{info.static_wide_ctas_per_sm} * device_sm_count())
              ? wide_tile_static_kernel(pb)
              : kernel;
      MSA_RETURN_IF_ERROR(
          launch_kernel(name, static_kernel, grid, dim3(kScoreThreads), 0, cuda_stream, prm));
    }
  }
  return launch_select(pb, sel, plan.chunks > 0, cuda_stream);
}

}  // namespace

IndexScoreParams make_score_params(const detail::IndexTopkProblem& pb, const RowMap& rows,
                                   float* scores) {
  IndexScoreParams prm;
  prm.index_q = pb.index_q.data;
  prm.q_dtype = pb.index_q.dtype;
  prm.q_stride_row = pb.index_q.strides[0];
  prm.q_stride_head = pb.index_q.strides[1];
  prm.q_stride_dim = pb.index_q.strides[2];
  prm.cache = pb.index_cache.data;
  prm.cache_stride_page = pb.index_cache.strides[0];
  prm.cache_stride_key = pb.index_cache.strides[1];
  prm.num_cache_blocks = pb.index_cache.shape[0];
  prm.block_table = pb.block_table.ptr<const int32_t>();
  prm.bt_stride_req = pb.block_table.strides[0];
  prm.bt_stride_block = pb.block_table.strides[1];
  prm.rows = rows;
  prm.num_heads = static_cast<int32_t>(pb.num_heads());
  prm.head_dim = static_cast<int32_t>(pb.head_dim());
  prm.rows_per_tile = rows_per_tile(pb);
  prm.blocks_per_cta = 1;
  prm.scores = scores;
  prm.error_flags = pb.error_flags.defined() ? pb.error_flags.ptr<int32_t>() : nullptr;
  prm.early_select = false;
  prm.balanced_lead = 0;
  return prm;
}

Status index_supported(const detail::IndexTopkProblem& pb) { return check_supported(pb); }

int16_t balanced_lead(const detail::IndexTopkProblem& pb) {
  return static_cast<int16_t>(detail::balanced_lead_units(pb.index_cache.shape[1] * pb.head_dim() *
                                                          dtype_size(pb.index_cache.dtype)));
}

IndexSelectParams make_select_params(const detail::IndexTopkProblem& pb, const RowMap& rows,
                                     const float* scores) {
  IndexSelectParams sel;
  sel.scores = scores;
  sel.rows = rows;
  sel.topk = pb.params.topk;
  sel.init_blocks = pb.params.init_blocks;
  sel.local_blocks = pb.params.local_blocks;
  sel.out = pb.topk_out.ptr<int32_t>();
  sel.out_stride_head = pb.topk_out.strides[0];
  sel.out_stride_row = pb.topk_out.strides[1];
  sel.out_stride_col = pb.topk_out.strides[2];
  sel.out_cols = pb.topk_out.shape[2];
  return sel;
}

Status workspace_size(const IndexTopkDecodeArgs& args, size_t* bytes) {
  *bytes = workspace_bytes(detail::index_topk_problem(args));
  return Status::Ok();
}

Status run(const IndexTopkDecodeArgs& args, Workspace workspace, Stream stream) {
  return run_problem(detail::index_topk_problem(args), workspace, stream);
}

Status workspace_size(const IndexTopkPrefillArgs& args, size_t* bytes) {
  *bytes = workspace_bytes(detail::index_topk_problem(args));
  return Status::Ok();
}

Status run(const IndexTopkPrefillArgs& args, Workspace workspace, Stream stream) {
  return run_problem(detail::index_topk_problem(args), workspace, stream);
}

}  // namespace cuda
}  // namespace msa
