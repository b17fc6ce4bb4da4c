// Fixture of the decode step tests: one sparse layer's decode batch (index queries and keys,
// attention queries and a paged KV cache, shuffled block tables, padded requests), the step's
// arguments, and the same step run as its two ops into separate outputs for comparison.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/paging.h"
#include "common/test_tensor.h"
#include "msa/decode_step.h"
#include "ops/attention_cases.h"

namespace msa {
namespace test {
namespace step {

struct StepSpec {
  int query_len = 1;
  std::vector<int64_t> seq_lens = {3000};  // 0 = padded request
  int64_t num_q_heads = 16, num_kv_heads = 1, index_dim = 128, head_dim = 128;
  int64_t block_size = 128, topk_width = 16;
  IndexTopkParams params;  // top-16, no init block, one local block
  DType kv_dtype = DType::kBF16;
  attn::Layout layout = attn::Layout::kPacked;
  bool with_lse = true;
  bool batch_invariant = false;
  uint64_t seed = 1;
};

// The step's tensors on a device. `topk`, `out`, `lse` take the step's outputs; `chain_*` those
// of the two ops run one after the other.
struct StepBatch {
  StepSpec spec;
  Device device;
  int64_t T = 0, max_blocks = 0;
  TestTensor index_q, index_cache, index_table, seq_lens, q, attn_table, flags;
  std::unique_ptr<attn::KvCacheFixture> cache;
  TestTensor topk, out, lse, chain_topk, chain_out, chain_lse;
};

inline std::unique_ptr<StepBatch> make_step_batch(const StepSpec& spec, const Device& device) {
  auto b = std::make_unique<StepBatch>();
  b->spec = spec;
  b->device = device;
  std::mt19937_64 rng(spec.seed);
  const int64_t nreq = static_cast<int64_t>(spec.seq_lens.size());
  b->T = nreq * spec.query_len;
  int64_t used = 0;
  for (int64_t s : spec.seq_lens) {
    b->max_blocks = std::max(b->max_blocks, ceil_div(s, spec.block_size));
    used += ceil_div(s, spec.block_size);
  }
  b->max_blocks += 1;  // one stale column past every request
  const int64_t num_blocks = used + 3;
  const int64_t hidx = spec.num_kv_heads, T = b->T;

  b->index_q = TestTensor(DType::kBF16, {T, hidx, spec.index_dim}, device);
  b->index_q.fill_uniform(rng, -1.0, 1.0);
  b->index_cache = TestTensor(DType::kBF16, {num_blocks, spec.block_size, spec.index_dim}, device);
  b->index_cache.fill_uniform(rng, -1.0, 1.0);
  b->seq_lens = TestTensor(DType::kI32, {nreq}, device);
  for (int64_t r = 0; r < nreq; ++r) b->seq_lens.set_flat(r, static_cast<double>(spec.seq_lens[r]));
  auto table = [&](TestTensor& t) {
    t = TestTensor(DType::kI32, {nreq, b->max_blocks}, device);
    const std::vector<int32_t> v = shuffled_block_table(spec.seq_lens, b->max_blocks, num_blocks,
                                                        spec.block_size, rng, attn::kStaleEntry);
    for (size_t i = 0; i < v.size(); ++i) t.set_flat(static_cast<int64_t>(i), v[i]);
  };
  table(b->index_table);
  table(b->attn_table);
  b->q = TestTensor(DType::kBF16, {T, spec.num_q_heads, spec.head_dim}, device);
  b->q.fill_uniform(rng, -2.0, 2.0);
  attn::CacheSpec cs;
  cs.layout = spec.layout;
  cs.dtype = spec.kv_dtype;
  cs.mode = spec.kv_dtype == DType::kE4M3 ? KvScaleMode::kPerLayer : KvScaleMode::kNone;
  cs.num_blocks = num_blocks;
  cs.num_kv_heads = spec.num_kv_heads;
  cs.block_size = spec.block_size;
  cs.head_dim = spec.head_dim;
  b->cache = std::make_unique<attn::KvCacheFixture>(cs, device, spec.seed + 7);
  b->flags = TestTensor(DType::kI32, {1}, device);
  b->flags.set_flat(0, 0);
  for (TestTensor* t : {&b->topk, &b->chain_topk}) {
    *t = TestTensor(DType::kI32, {hidx, T, spec.topk_width}, device);
  }
  for (TestTensor* t : {&b->out, &b->chain_out}) {
    *t = TestTensor(DType::kBF16, {T, spec.num_q_heads, spec.head_dim}, device);
  }
  for (TestTensor* t : {&b->lse, &b->chain_lse}) {
    *t = TestTensor(DType::kF32, {T, spec.num_q_heads}, device);
  }
  for (TestTensor* t : {&b->index_q, &b->index_cache, &b->seq_lens, &b->index_table, &b->attn_table,
                        &b->q, &b->flags}) {
    t->upload();
  }
  for (TestTensor* t : {&b->topk, &b->chain_topk, &b->out, &b->chain_out, &b->lse, &b->chain_lse}) {
    t->poison_device();
  }
  return b;
}

// The step's arguments writing into `topk`, `out` and `lse`.
inline SparseDecodeStepArgs step_args(const StepBatch& b, const TestTensor& topk,
                                      const TestTensor& out, const TestTensor& lse) {
  SparseDecodeStepArgs a;
  IndexTopkDecodeArgs& idx = a.index;
  idx.params = b.spec.params;
  idx.params.topk = static_cast<int>(b.spec.topk_width);
  idx.query_len = b.spec.query_len;
  idx.index_q = b.index_q.view();
  idx.index_cache = b.index_cache.view();
  idx.block_table = b.index_table.view();
  idx.seq_lens = b.seq_lens.view();
  idx.topk_out = topk.view();
  idx.error_flags = b.flags.view();
  idx.batch_invariant = b.spec.batch_invariant;
  SparseAttentionDecodeArgs& at = a.attention;
  at.query_len = b.spec.query_len;
  at.q = b.q.view();
  at.kv_cache = b.cache->view();
  at.block_table = b.attn_table.view();
  at.seq_lens = b.seq_lens.view();
  at.topk = topk.view();
  at.out = out.view();
  if (b.spec.with_lse) at.lse = lse.view();
  at.error_flags = b.flags.view();
  at.batch_invariant = b.spec.batch_invariant;
  return a;
}

inline SparseDecodeStepArgs step_args(const StepBatch& b) {
  return step_args(b, b.topk, b.out, b.lse);
}

// The two ops into chain_topk, chain_out and chain_lse.
inline Status run_chain(const StepBatch& b, Stream stream = Stream{}) {
  const SparseDecodeStepArgs a = step_args(b, b.chain_topk, b.chain_out, b.chain_lse);
  const Status st = attn::run_op(a.index, b.device, stream);
  if (!st.ok()) return st;
  return attn::run_op(a.attention, b.device, stream);
}

}  // namespace step
}  // namespace test
}  // namespace msa
