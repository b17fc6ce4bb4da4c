// Float-free reference of the batch metadata op (spec A8), written from the spec: rows are
// enumerated one by one per request (no prefix-sum tricks), positions and slots follow the
// formulas of the header. Valid inputs only; the tests state the expected error for bad ones.
#pragma once

#include <cstdint>
#include <vector>

namespace msa {
namespace oracle {

struct MetadataInput {
  int64_t num_decode_requests = 0;
  int64_t decode_query_len = 1;
  int64_t block_size = 128;
  std::vector<int64_t> query_lens;   // [B]
  std::vector<int64_t> seq_lens;     // [B]
  std::vector<int32_t> block_table;  // [B, max_blocks] row-major
  int64_t max_blocks = 0;
  std::vector<int32_t> index_block_table;  // [B, index_max_blocks] row-major; empty = none
  int64_t index_max_blocks = 0;
  int64_t token_capacity = 0;  // length of every per-token output
};

struct MetadataOutput {
  std::vector<int64_t> query_start_loc;       // [B + 1]
  std::vector<int64_t> prefill_cu_seqlens_q;  // [B - nd + 1]
  std::vector<int64_t> prefill_cu_seqlens_k;  // [B - nd + 1]
  std::vector<int64_t> context_lens;          // [B]
  std::vector<int64_t> kv_block_counts;       // [B]
  std::vector<int64_t> token_request;         // [token_capacity]
  std::vector<int64_t> token_position;        // [token_capacity]
  std::vector<int64_t> slot_mapping;          // [token_capacity]
  std::vector<int64_t> index_slot_mapping;    // [token_capacity]; -1 when no index table
  std::vector<int64_t> totals;                // [4]; [3] sums prefill requests' blocks
};

MetadataOutput batch_metadata(const MetadataInput& in);

}  // namespace oracle
}  // namespace msa
