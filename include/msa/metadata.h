// Batch metadata builder (spec A8): one call per step turns per-request query lengths,
// sequence lengths and block tables into the per-token and per-request tensors every layer
// reads. Runs on the tensors' device with no host reads of device data.
#pragma once

#include "msa/tensor.h"

namespace msa {

// Requests are ordered decodes first: requests [0, num_decode_requests) have query length
// decode_query_len (or 0 with seq_len 0: a padded request), the rest are prefills (query
// length >= 1). Decode rows are laid out request-major with exactly decode_query_len rows per
// decode request, padded ones included, then the prefill rows. Token t of request b:
//   position = seq_lens[b] - query_len_b + (t - start_b)   (negative for padded rows)
//   slot     = block_table[b, position / block_size] * block_size + position % block_size
// Every output is optional; outputs sized beyond the batch (up to their capacity) are filled:
// tokens past the batch get request -1, position -1, slot -1.
struct BatchMetadataArgs {
  int num_decode_requests = 0;  // host value the caller already has
  int decode_query_len = 1;     // 1..8
  int block_size = 128;

  TensorView query_lens;         // [B] i32 (device)
  TensorView seq_lens;           // [B] i32: cached + new tokens after this step
  TensorView block_table;        // [B, max_blocks] i32 main-cache pages (needed for slot_mapping)
  TensorView index_block_table;  // optional [B, max_blocks] i32 (for index_slot_mapping)

  TensorView query_start_loc;       // [B + 1] i32, row offsets of every request (decode rows
                                    // counted as decode_query_len for padded requests too)
  TensorView prefill_cu_seqlens_q;  // [B - nd + 1] i32, rebased to 0 at the first prefill row
  TensorView prefill_cu_seqlens_k;  // [B - nd + 1] i32, cumulative prefill seq_lens
  TensorView context_lens;          // [B] i32 = seq_len - query_len (cached prefix)
  TensorView kv_block_counts;       // [B] i32 = ceil(seq_len / block_size)
  TensorView token_request;         // [max_tokens] i32
  TensorView token_position;        // [max_tokens] i32
  TensorView slot_mapping;          // [max_tokens] i64
  TensorView index_slot_mapping;    // [max_tokens] i64 (needs index_block_table)
  // [4] i32: num_decode_tokens, num_prefill_tokens, num_tokens, total_kv_blocks; the last is
  // ceil(seq_len / block_size) summed over the prefill requests only (spec B6: it sizes the
  // prefill-side structures)
  TensorView totals;
  TensorView error_flags;  // optional [1] i32
};

Status check(const BatchMetadataArgs& args);
Status workspace_size(const BatchMetadataArgs& args, size_t* bytes);
Status run(const BatchMetadataArgs& args, Workspace workspace, Stream stream);

}  // namespace msa
