#include "oracle/metadata_oracle.h"

#include <cstddef>

namespace msa {
namespace oracle {

namespace {

struct Row {
  int64_t request;
  int64_t position;
};

int64_t slot_for(const std::vector<int32_t>& table, int64_t columns, int64_t block_size,
                 const Row& row) {
  if (table.empty() || row.position < 0) return -1;
  const int64_t page =
      table[static_cast<size_t>(row.request * columns + row.position / block_size)];
  return page * block_size + row.position % block_size;
}

}  // namespace

MetadataOutput batch_metadata(const MetadataInput& in) {
  const int64_t batch = static_cast<int64_t>(in.query_lens.size());
  const int64_t nd = in.num_decode_requests;
  const int64_t L = in.decode_query_len;
  MetadataOutput out;

  // Rows in batch order: L rows per decode request (padded ones too, at negative positions
  // seq_len - L + r), then query_len rows per prefill request ending at seq_len - 1.
  std::vector<Row> rows;
  for (int64_t b = 0; b < batch; ++b) {
    out.query_start_loc.push_back(static_cast<int64_t>(rows.size()));
    const int64_t s = in.seq_lens[static_cast<size_t>(b)];
    const int64_t n = b < nd ? L : in.query_lens[static_cast<size_t>(b)];
    for (int64_t r = 0; r < n; ++r) rows.push_back(Row{b, s - n + r});
  }
  out.query_start_loc.push_back(static_cast<int64_t>(rows.size()));

  int64_t decode_tokens = 0, prefill_tokens = 0, kv_blocks = 0, keys = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t q = in.query_lens[static_cast<size_t>(b)];
    const int64_t s = in.seq_lens[static_cast<size_t>(b)];
    out.context_lens.push_back(s - q);
    int64_t blocks = 0;
    while (blocks * in.block_size < s) ++blocks;
    out.kv_block_counts.push_back(blocks);
    if (b < nd) {
      decode_tokens += L;
    } else {
      kv_blocks += blocks;  // total_kv_blocks: prefill requests only (spec B6)
      out.prefill_cu_seqlens_q.push_back(prefill_tokens);
      out.prefill_cu_seqlens_k.push_back(keys);
      prefill_tokens += q;
      keys += s;
    }
  }
  out.prefill_cu_seqlens_q.push_back(prefill_tokens);
  out.prefill_cu_seqlens_k.push_back(keys);
  out.totals = {decode_tokens, prefill_tokens, decode_tokens + prefill_tokens, kv_blocks};

  for (int64_t t = 0; t < in.token_capacity; ++t) {
    if (t < static_cast<int64_t>(rows.size())) {
      const Row& row = rows[static_cast<size_t>(t)];
      out.token_request.push_back(row.request);
      out.token_position.push_back(row.position);
      out.slot_mapping.push_back(slot_for(in.block_table, in.max_blocks, in.block_size, row));
      out.index_slot_mapping.push_back(
          slot_for(in.index_block_table, in.index_max_blocks, in.block_size, row));
    } else {
      out.token_request.push_back(-1);
      out.token_position.push_back(-1);
      out.slot_mapping.push_back(-1);
      out.index_slot_mapping.push_back(-1);
    }
  }
  return out;
}

}  // namespace oracle
}  // namespace msa
