// The three forms of attention (sparse decode, sparse prefill, dense) as one problem, shared by
// the validation and every backend: decode rows come query_len per request, prefill and dense
// rows from cu_seqlens_q; the sparse forms attend to the blocks in topk.
#pragma once

#include <cmath>
#include <cstdint>

#include "msa/attention.h"

namespace msa {
namespace detail {

enum class AttentionForm { kDecode, kPrefill, kDense };

struct AttentionProblem {
  AttentionForm form = AttentionForm::kDense;
  int query_len = 0;             // decode rows per request; 0 for the other forms
  float softmax_scale = 0.0f;    // as given: 0 selects head_dim^-0.5 (scale())
  bool batch_invariant = false;  // plans depend on a row's shapes only, not on the batch
  TensorView q;
  KvCacheView kv;
  TensorView block_table, seq_lens, cu_seqlens_q, topk, out, lse, error_flags;

  bool sparse() const { return form != AttentionForm::kDense; }
  int64_t num_rows() const { return q.shape[0]; }
  int64_t num_q_heads() const { return q.shape[1]; }
  int64_t head_dim() const { return kv.head_dim(); }
  int64_t num_kv_heads() const { return kv.num_kv_heads(); }
  int64_t group() const { return num_q_heads() / num_kv_heads(); }  // q heads per KV head
  int64_t block_size() const { return kv.block_size(); }
  int64_t num_blocks() const { return kv.num_blocks(); }
  int64_t num_requests() const { return block_table.shape[0]; }
  int64_t max_blocks() const { return block_table.shape[1]; }
  int64_t topk_width() const { return sparse() ? topk.shape[2] : 0; }
  // The softmax scale the ops apply.
  float scale() const {
    return softmax_scale != 0.0f ? softmax_scale : 1.0f / std::sqrt(static_cast<float>(head_dim()));
  }
};

inline AttentionProblem attention_problem(const SparseAttentionDecodeArgs& a) {
  AttentionProblem pb;
  pb.form = AttentionForm::kDecode;
  pb.query_len = a.query_len;
  pb.softmax_scale = a.softmax_scale;
  pb.batch_invariant = a.batch_invariant;
  pb.q = a.q;
  pb.kv = a.kv_cache;
  pb.block_table = a.block_table;
  pb.seq_lens = a.seq_lens;
  pb.topk = a.topk;
  pb.out = a.out;
  pb.lse = a.lse;
  pb.error_flags = a.error_flags;
  return pb;
}

inline AttentionProblem attention_problem(const SparseAttentionPrefillArgs& a) {
  AttentionProblem pb;
  pb.form = AttentionForm::kPrefill;
  pb.softmax_scale = a.softmax_scale;
  pb.batch_invariant = a.batch_invariant;
  pb.q = a.q;
  pb.kv = a.kv_cache;
  pb.block_table = a.block_table;
  pb.seq_lens = a.seq_lens;
  pb.cu_seqlens_q = a.cu_seqlens_q;
  pb.topk = a.topk;
  pb.out = a.out;
  pb.lse = a.lse;
  pb.error_flags = a.error_flags;
  return pb;
}

inline AttentionProblem attention_problem(const DenseAttentionArgs& a) {
  AttentionProblem pb;
  pb.form = AttentionForm::kDense;
  pb.softmax_scale = a.softmax_scale;
  pb.batch_invariant = a.batch_invariant;
  pb.q = a.q;
  pb.kv = a.kv_cache;
  pb.block_table = a.block_table;
  pb.seq_lens = a.seq_lens;
  pb.cu_seqlens_q = a.cu_seqlens_q;
  pb.out = a.out;
  pb.lse = a.lse;
  pb.error_flags = a.error_flags;
  return pb;
}

}  // namespace detail
}  // namespace msa
