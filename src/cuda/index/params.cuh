// The indexer (spec A2-A4, A12): constants and kernel parameters shared by its score and select
// kernels. src/cuda/index/launch.cu describes the work decomposition.
#pragma once

#include <cstdint>

#include "core/index_topk_problem.h"
#include "cuda/common.cuh"
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

// A call's score and select kernel parameters (launch.cu), block maxima in `scores`; the score
// parameters of a static grid of one-block CTAs, which the launcher adjusts to its plan.
IndexScoreParams make_score_params(const detail::IndexTopkProblem& pb, const RowMap& rows,
                                   float* scores);
IndexSelectParams make_select_params(const detail::IndexTopkProblem& pb, const RowMap& rows,
                                     const float* scores);
// Whether the CUDA indexer serves the call (kNotSupported naming what it does not).
Status index_supported(const detail::IndexTopkProblem& pb);
// IndexScoreParams::balanced_lead of a balanced grid over the call's index cache.
int16_t balanced_lead(const detail::IndexTopkProblem& pb);

}  // namespace cuda
}  // namespace msa
