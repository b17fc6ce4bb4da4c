// Float64 reference for the attention ops (spec A5, A10), written from the spec and the header
// comments of include/msa/attention.h and include/msa/indexer.h; shares no code with src/.
#pragma once

#include <cstdint>
#include <vector>

namespace msa {
namespace oracle {

// Dequantised main cache (x = stored * scale), [num_blocks, num_kv_heads, block_size, head_dim].
struct KvValues {
  int64_t num_blocks = 0, num_kv_heads = 0, block_size = 0, head_dim = 0;
  std::vector<double> k, v;

  int64_t index(int64_t page, int64_t g, int64_t tok, int64_t d) const {
    return ((page * num_kv_heads + g) * block_size + tok) * head_dim + d;
  }
};

// One batch of query rows. Row t belongs to request row_request[t] (-1: padding) at absolute
// position row_pos[t]. Sparse rows attend { j : j <= p, j < seq_len, j / block_size in Sel }
// with Sel the set of non-negative ids of topk[g, t, :]; dense rows { j : j <= p, j < seq_len }.
struct AttentionBatch {
  int64_t num_q_heads = 0, num_kv_heads = 0, head_dim = 0;
  double scale = 0.0;  // the resolved softmax scale
  std::vector<int64_t> row_request, row_pos;
  std::vector<int64_t> seq_lens;
  std::vector<int32_t> block_table;  // [num_requests, max_blocks]
  int64_t max_blocks = 0;
  bool sparse = false;
  std::vector<int32_t> topk;  // [num_kv_heads, topk_rows, topk_width]
  int64_t topk_rows = 0, topk_width = 0;
};

// out [T, Hq, D]; lse [T, Hq] natural log, -inf (and out 0) for rows without keys.
struct AttentionResult {
  std::vector<double> out, lse;
};

AttentionResult attention(const AttentionBatch& batch, const std::vector<double>& q,
                          const KvValues& kv);

// Plain paged attention over the page-16 virtual sequences of spec A10: row r = t * Hkv + h of
// `table` ([T * Hkv, width]) attends the first context_lens[r] tokens of its virtual sequence,
// token i being offset i % 16 of page-16 id table[r, i / 16]. A page-16 id n addresses KV head
// n % Hkv, main page (n / Hkv) / page_stride, tokens 16 * ((n / Hkv) % page_stride) + [0, 16).
// q heads h * G .. h * G + G - 1 of row t use row r. Returns out [T, Hq, D] and lse [T, Hq].
AttentionResult page16_attention(const std::vector<double>& q, int64_t num_q_heads, double scale,
                                 const std::vector<int32_t>& table, int64_t width,
                                 const std::vector<int32_t>& context_lens, int64_t page_stride,
                                 const KvValues& kv);

}  // namespace oracle
}  // namespace msa
