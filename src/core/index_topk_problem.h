// The decode and prefill forms of the indexer as one problem, shared by the backends: decode
// rows have a uniform query_len (> 0), prefill rows come from cu_seqlens_q (query_len 0).
#pragma once

#include <cstdint>

#include "msa/indexer.h"

namespace msa {
namespace detail {

struct IndexTopkProblem {
  IndexTopkParams params;
  int query_len = 0;
  bool batch_invariant = false;
  TensorView index_q, index_cache, block_table, seq_lens, cu_seqlens_q, topk_out, error_flags;

  int64_t num_rows() const { return index_q.shape[0]; }
  int64_t num_heads() const { return index_q.shape[1]; }
  int64_t head_dim() const { return index_q.shape[2]; }
  int64_t num_requests() const { return seq_lens.shape[0]; }
  int64_t block_size() const { return index_cache.shape[1]; }
  int64_t num_blocks() const { return index_cache.shape[0]; }
  int64_t max_blocks() const { return block_table.shape[1]; }
};

inline IndexTopkProblem index_topk_problem(const IndexTopkDecodeArgs& a) {
  IndexTopkProblem pb;
  pb.params = a.params;
  pb.query_len = a.query_len;
  pb.batch_invariant = a.batch_invariant;
  pb.index_q = a.index_q;
  pb.index_cache = a.index_cache;
  pb.block_table = a.block_table;
  pb.seq_lens = a.seq_lens;
  pb.topk_out = a.topk_out;
  pb.error_flags = a.error_flags;
  return pb;
}

inline IndexTopkProblem index_topk_problem(const IndexTopkPrefillArgs& a) {
  IndexTopkProblem pb;
  pb.params = a.params;
  pb.batch_invariant = a.batch_invariant;
  pb.index_q = a.index_q;
  pb.index_cache = a.index_cache;
  pb.block_table = a.block_table;
  pb.seq_lens = a.seq_lens;
  pb.cu_seqlens_q = a.cu_seqlens_q;
  pb.topk_out = a.topk_out;
  pb.error_flags = a.error_flags;
  return pb;
}

}  // namespace detail
}  // namespace msa
