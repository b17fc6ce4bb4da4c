// Float64 reference of the indexer top-k (spec A2-A4, A12), written from the spec alone: block
// scores S_h(p, b) in double and the selection under the total order (tier, score, lower id).
#pragma once

#include <cstdint>
#include <vector>

namespace msa {
namespace oracle {

// Plain host description of one indexer call. Rows are given explicitly by their request and
// absolute position (position < 0: padding row).
struct IndexTopkInput {
  int64_t num_heads = 1;
  int64_t head_dim = 0;
  int64_t block_size = 128;
  std::vector<double> index_q;       // [T, num_heads, head_dim] row-major
  std::vector<double> index_cache;   // [num_blocks, block_size, head_dim] row-major
  std::vector<int32_t> block_table;  // [num_requests, max_blocks] row-major
  int64_t max_blocks = 0;
  std::vector<int64_t> row_request;   // [T]
  std::vector<int64_t> row_position;  // [T]
  int topk = 16;
  int init_blocks = 0;
  int local_blocks = 1;
  int64_t width = 16;  // output columns K
};

// Tier of block b for a row with nvb visible blocks: 2 init, 1 local, 0 scored.
int index_block_tier(const IndexTopkInput& in, int64_t nvb, int64_t b);

// S_h(p, b) of row t for every visible block b in [0, p / block_size] (NaN dot -> -1e30);
// empty for padding rows. Forced blocks get their real score too.
std::vector<double> index_block_scores(const IndexTopkInput& in, int64_t t, int64_t h);

// topk_out[h, t, :] of one row: the kept ids ascending, then -1 up to width.
std::vector<int32_t> index_topk_row(const IndexTopkInput& in, int64_t t, int64_t h);

// The whole output [num_heads, T, width].
std::vector<int32_t> index_topk(const IndexTopkInput& in);

}  // namespace oracle
}  // namespace msa
